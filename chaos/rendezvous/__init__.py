"""Rendezvous backends: how torchrun's agents find each other. One module per backend, each a plug-in."""
