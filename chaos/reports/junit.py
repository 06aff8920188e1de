"""JUnit XML: one test case per expectation and per checkpoint verdict, so any CI shows them."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from chaos.paths import shown
from chaos.reports.model import Report
from chaos.reports.text import fmt, limit_text
from chaos.run_result import ERROR_VERDICTS


def render_junit(report: Report) -> str:
    r = report.result
    suite = ET.Element("testsuite", name=f"torch-chaos.{r.scenario}")
    cases = 0
    failures = 0
    skipped = 0
    for x in r.expectations:
        case = ET.SubElement(suite, "testcase", classname=f"chaos.{r.scenario}.expect", name=x.name,
                             time=fmt(r.duration_s or 0.0, digits=3))
        cases += 1
        if not x.ok:
            failures += 1
            ET.SubElement(case, "failure", message=f"measured {fmt(x.value)}, limit {limit_text(x.limit)}")
    for name, v in r.checkpoint.items():
        case = ET.SubElement(suite, "testcase", classname=f"chaos.{r.scenario}.checkpoint", name=name)
        cases += 1
        if v.ok is None:
            skipped += 1
            ET.SubElement(case, "skipped", message=v.why)
        elif not v.ok:
            failures += 1
            ET.SubElement(case, "failure", message=v.why)
        else:  # what passed and how (bitwise, within the measured noise, ...) shows in the CI's test output
            ET.SubElement(case, "system-out").text = v.why
    errors = 0
    if r.verdict in ("hung", "restart_loop", "error"):
        case = ET.SubElement(suite, "testcase", classname=f"chaos.{r.scenario}", name="run")
        cases += 1
        if r.verdict in ERROR_VERDICTS:  # the test did not happen: a CI error, not a failure (as exit 3 vs 1)
            errors += 1
            ET.SubElement(case, "error", message=f"error: the test did not happen: {r.why}")
        else:
            failures += 1
            ET.SubElement(case, "failure", message=f"{r.verdict}: {r.why}")
    props = ET.SubElement(suite, "properties")
    ET.SubElement(props, "property", name="run_dir", value=shown(report.run_dir))
    ET.SubElement(props, "property", name="verdict", value=r.verdict)
    suite.set("tests", str(cases))
    suite.set("failures", str(failures))
    suite.set("skipped", str(skipped))
    suite.set("errors", str(errors))
    ET.indent(suite)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(suite, encoding="unicode") + "\n"
