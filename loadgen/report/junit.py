"""JUnit XML from the canonical report: what CI systems (GitLab, Jenkins, GitHub's test reporters) show as tests.

One test suite per run, one test case per evaluated SLO (per variant, and mix where the SLO names one), failing with
the measured value against its threshold, plus one case for the run's trust (failing with every reason, e.g. the
worker whose loop lagged; an error, not a failure, when the run failed: no verdict). A report whose run was not
trustworthy also marks its SLO cases, since their numbers may be the load generator's own queueing.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

from loadgen.report.numbers import AS_SET, in_percent, ms

__all__ = ["render_junit"]


def _case_name(slo: dict[str, Any]) -> str:
    where = slo["variant"] + (f"/{slo['mix']}" if slo.get("mix") else "")
    return f"{where}: {slo['slo']}"


def _measured(slo: dict[str, Any]) -> str:
    if slo.get("min_percent") is not None:  # a share: success rate, open-loop arrivals sent
        observed = slo.get("observed_percent")
        value = in_percent(observed, missing="no requests")
        name = slo["metric"].replace("_", " ")
        note = f" ({slo['note']})" if slo.get("note") else ""
        return f"{name} {value}, threshold ≥ {in_percent(slo['min_percent'], AS_SET)}{note}"
    observed = slo.get("observed_ms")
    if slo.get("censored"):
        value = "above every measured value (censored: requests failed before reaching it)"
    elif observed is None:
        value = "no data"
    else:
        value = f"{ms(observed)} ms"
    return f"{slo['metric']} {slo['stat']} {value}, threshold ≤ {slo['max_ms']:g} ms"


def render_junit(report: dict[str, Any]) -> str:
    suite_name = f"loadgen.{report['scenario']}"
    slos = report.get("slos", [])
    run = report["run"]
    trusted = bool(run.get("trustworthy"))
    crashed = run.get("failed") or []  # the run failed: an error of the run's own case, whatever its trust
    target = run.get("target_breaches") or []  # a dead target: a case of its own, failed (exit 1)
    failures = sum(not s["passed"] for s in slos) + (not trusted and not crashed) + bool(target)
    tests = len(slos) + 1 + bool(target)
    suites = ET.Element("testsuites", name="loadgen", tests=str(tests), failures=str(failures))
    suite = ET.SubElement(
        suites,
        "testsuite",
        name=suite_name,
        tests=str(tests),
        failures=str(failures),
        errors=str(int(bool(crashed))),
        skipped="0",
        time=f"{float(run.get('window_s') or 0.0):.3f}",
        timestamp=str(report.get("generated_at", "")),
    )
    props = ET.SubElement(suite, "properties")
    for name, value in (("seed", report.get("seed")), ("exit_code", report.get("exit_code"))):
        ET.SubElement(props, "property", name=name, value=str(value))
    for slo in slos:
        case = ET.SubElement(suite, "testcase", classname=f"{suite_name}.slo", name=_case_name(slo))
        measured = _measured(slo)
        if not slo["passed"]:
            failure = ET.SubElement(case, "failure", message=f"SLO breached: {measured}", type="SLOBreach")
            failure.text = f"{_case_name(slo)}\nmeasured: {measured}"
        else:
            ET.SubElement(case, "system-out").text = f"met: {measured}"
    if target:
        case = ET.SubElement(suite, "testcase", classname=f"{suite_name}.run", name="target")
        failure = ET.SubElement(case, "failure", message="target breached: " + "; ".join(target), type="TargetBreach")
        failure.text = "\n".join(target)
    trust = ET.SubElement(suite, "testcase", classname=f"{suite_name}.run", name="run trust")
    if crashed:
        error = ET.SubElement(trust, "error", message="run failed: " + "; ".join(crashed), type="RunFailed")
        error.text = "\n".join(crashed)
    elif not trusted:
        reasons = run.get("untrustworthy_reasons") or ["not trustworthy"]
        failure = ET.SubElement(
            trust, "failure", message="run not trustworthy: " + "; ".join(reasons), type="Untrustworthy"
        )
        failure.text = "\n".join(reasons)
    ET.indent(suites)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"
