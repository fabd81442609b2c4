"""The node report as JUnit XML, one testcase per result, so CI systems show failures natively.

FAIL -> <failure>, ERROR -> <error>, SKIP -> <skipped>; WARN passes with the warning in system-out.
"""
from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from verify.bounded_load import finite_number
from verify.report import action_label, action_of_report, fact_text, host_of, one_line, results_of, section, summary_of
from verify.result import Status

# Characters XML 1.0 cannot carry at all (tool output may hold them): shown as \xNN instead.
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def xml_text(value: object) -> str:
    return _NOT_XML.sub(lambda m: f"\\x{ord(m.group()):02x}", str(value))


def render(report: dict) -> str:
    results = results_of(report)
    counts, _ = summary_of(report)
    seconds = str(finite_number(section(report, "run").get("duration_s")) or 0)
    suites = ET.Element("testsuites", name="tunefleet", tests=str(len(results)),
                        failures=str(counts["FAIL"]), errors=str(counts["ERROR"]),
                        skipped=str(counts["SKIP"]), time=seconds)
    host = xml_text(host_of(report))
    suite = ET.SubElement(suites, "testsuite", name=f"tunefleet.{host}", hostname=host,
                          tests=str(len(results)), failures=str(counts["FAIL"]), errors=str(counts["ERROR"]),
                          skipped=str(counts["SKIP"]), time=seconds,
                          timestamp=xml_text(fact_text(report, "generated_at", default="")))
    properties = ET.SubElement(suite, "properties")
    ET.SubElement(properties, "property", name="schema", value=xml_text(fact_text(report, "schema", default="")))
    ET.SubElement(properties, "property", name="profile", value=xml_text(fact_text(report, "profile", default="")))
    ET.SubElement(properties, "property", name="action", value=action_of_report(report))
    for r in results:
        case = ET.SubElement(suite, "testcase", classname=xml_text(f"tunefleet.{r.role}"), name=xml_text(r.check_id),
                             time="0")
        text = xml_text(f"expected: {one_line(r.expected)}\nobserved: {one_line(r.observed)}\n"
                        + (f"remediation: {r.remediation}\n" if r.remediation else ""))
        reason = xml_text(r.reason)
        label = action_label(r)  # "FAIL [reboot]": the type CI shows says what to do
        if r.status is Status.FAIL:
            ET.SubElement(case, "failure", message=reason, type=label).text = text
        elif r.status is Status.ERROR:
            ET.SubElement(case, "error", message=reason, type=label).text = text
        elif r.status is Status.SKIP:
            ET.SubElement(case, "skipped", message=reason)
        elif r.status is Status.WARN:
            ET.SubElement(case, "system-out").text = f"{label}: {reason}\n{text}"
    ET.indent(suites)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"
