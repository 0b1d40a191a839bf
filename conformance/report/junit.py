"""JUnit XML: one test case per clause, named by its clause id (classname = area)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from rlconform.conformance.results import RunReport


def render(report: RunReport) -> str:
    summary = report.summary
    suite = ET.Element(
        "testsuite",
        name=f"rlconform.{report.target['name']}",
        tests=str(len(report.clauses)),
        failures=str(summary["fail"]),
        errors=str(summary["error"]),
        skipped=str(summary["skip"]),
        time=f"{sum(r.duration_s for r in report.clauses):.3f}",
    )
    props = ET.SubElement(suite, "properties")
    for key, value in report.target.items():
        ET.SubElement(props, "property", name=f"target.{key}", value=str(value))
    from rlconform.conformance.consequence import rank

    ordered = sorted(
        report.clauses,
        key=lambda r: rank(r.consequence) if r.status in ("fail", "error", "deviation") else 99,
    )
    for result in ordered:
        case = ET.SubElement(
            suite,
            "testcase",
            classname=f"rlconform.{result.id.split('.', 1)[0]}",
            name=result.id,
            time=f"{result.duration_s:.3f}",
        )
        case_props = ET.SubElement(case, "properties")
        ET.SubElement(case_props, "property", name="clause", value=result.id)
        ET.SubElement(case_props, "property", name="status", value=result.status)
        if result.severity:
            ET.SubElement(case_props, "property", name="severity", value=result.severity)
            ET.SubElement(case_props, "property", name="features", value=",".join(result.features))
        if result.check:
            ET.SubElement(case_props, "property", name="check", value=result.check)
        if result.consequence:
            ET.SubElement(case_props, "property", name="consequence", value=result.consequence)
            ET.SubElement(case_props, "property", name="configs", value=",".join(result.configs))
        graded = f"[{result.severity}] " if result.severity else ""
        if result.consequence:
            graded = f"[{result.consequence}] " + graded
        if result.status == "fail":
            node = ET.SubElement(case, "failure", message=graded + result.message.splitlines()[0])
            node.text = _body(result)
        elif result.status == "error":
            node = ET.SubElement(case, "error", message=graded + result.message.splitlines()[0])
            node.text = _body(result)
        elif result.status == "skip":
            ET.SubElement(case, "skipped", message=result.message)
        elif result.status == "deviation":
            out = ET.SubElement(case, "system-out")
            out.text = graded + result.message
    ET.indent(suite)
    return ET.tostring(suite, encoding="unicode", xml_declaration=True) + "\n"


def _body(result) -> str:
    parts = [result.message]
    if result.counterexample and "reproducer" in result.counterexample:
        parts.append("Reproducer:\n" + result.counterexample["reproducer"])
    if result.traceback:
        parts.append(result.traceback)
    return "\n\n".join(parts)


def write(report: RunReport, path: str | Path) -> None:
    Path(path).write_text(render(report), encoding="utf-8")
