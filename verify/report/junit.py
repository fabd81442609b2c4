"""The node report as JUnit XML, one testcase per result, so CI systems show failures natively.

FAIL -> <failure>, ERROR -> <error>, SKIP -> <skipped>; WARN passes with the warning in system-out.
"""
from __future__ import annotations

import xml.etree.ElementTree as ET

from verify.report import one_line, results_of
from verify.result import Status


def render(report: dict) -> str:
    results = results_of(report)
    counts = report["summary"]["counts"]
    seconds = str((report.get("run") or {}).get("duration_s") or 0)
    suites = ET.Element("testsuites", name="tunefleet", tests=str(len(results)),
                        failures=str(counts["FAIL"]), errors=str(counts["ERROR"]),
                        skipped=str(counts["SKIP"]), time=seconds)
    suite = ET.SubElement(suites, "testsuite", name=f"tunefleet.{report['host']}", hostname=report["host"],
                          tests=str(len(results)), failures=str(counts["FAIL"]), errors=str(counts["ERROR"]),
                          skipped=str(counts["SKIP"]), timestamp=report["generated_at"], time=seconds)
    properties = ET.SubElement(suite, "properties")
    ET.SubElement(properties, "property", name="schema", value=report["schema"])
    ET.SubElement(properties, "property", name="profile", value=str(report.get("profile") or ""))
    for r in results:
        case = ET.SubElement(suite, "testcase", classname=f"tunefleet.{r.role}", name=r.check_id, time="0")
        text = f"expected: {one_line(r.expected)}\nobserved: {one_line(r.observed)}\n"
        if r.remediation:
            text += f"remediation: {r.remediation}\n"
        if r.status is Status.FAIL:
            ET.SubElement(case, "failure", message=r.reason, type="FAIL").text = text
        elif r.status is Status.ERROR:
            ET.SubElement(case, "error", message=r.reason, type="ERROR").text = text
        elif r.status is Status.SKIP:
            ET.SubElement(case, "skipped", message=r.reason)
        elif r.status is Status.WARN:
            ET.SubElement(case, "system-out").text = f"WARN: {r.reason}\n{text}"
    ET.indent(suites)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"
