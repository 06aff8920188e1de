"""Launchers: how a job's processes start on its nodes (torchrun, one supervised process, Ray); see base.py."""
