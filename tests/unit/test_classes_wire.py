"""Priority classes on the wire: each class's headers with every request of it, its `priority` in the body of the
dialects whose servers read one (openai-*: vLLM, SGLang) and nowhere else, and records (raw rows too) that carry
the class. Without classes, the bytes are those of a scenario that never heard of them."""

from __future__ import annotations

import orjson
import pytest

from loadgen.config.scenario import Scenario, parse_scenario
from loadgen.locust_plugin.request_stream import class_wire
from loadgen.measure.records import RequestRecord
from loadgen.protocol.dialects import DIALECT_NAMES, get_dialect
from loadgen.traffic.sampler import sampler_for

CLASSES = """\
traffic:
  classes:
    - {name: interactive, priority: 0, headers: {X-Priority: high, X-Tenant: paid}}
    - {name: batch, priority: 10, headers: {X-Priority: low}}
    - {name: plain}
"""
# The dialects whose servers take a request's scheduling priority in the body.
IN_BODY = {"openai-chat", "openai-completions", "openai-responses"}


def _scenario(dialect: str, base_url: str = "http://127.0.0.1:1", classes: str = CLASSES, extra: str = "") -> Scenario:
    variant = f'  - {{name: a, base_url: "{base_url}", model: m, dialect: {dialect}{extra}}}\n'
    return parse_scenario(f"variants:\n{variant}{classes}")


@pytest.mark.parametrize("dialect", sorted(DIALECT_NAMES))
def test_headers_always_and_priority_only_where_the_dialect_has_the_field(dialect: str) -> None:
    s = _scenario(dialect)
    variant = s.variants[0]
    wire = class_wire(s, variant)
    assert set(wire) == {"interactive", "batch", "plain"}
    assert wire["interactive"][0] == b"X-Priority: high\r\nX-Tenant: paid\r\n"
    assert wire["batch"][0] == b"X-Priority: low\r\n" and wire["plain"][0] == b""
    sampler = sampler_for(s, 0)
    dia = get_dialect(dialect)
    for name, priority in (("interactive", 0), ("batch", 10), ("plain", None)):
        spec = sampler.spec_at(0)
        body = orjson.loads(dia.build_body(spec, "m", False, wire[name][1]))
        sent = body.get("priority", "absent")
        if dialect in IN_BODY and priority is not None:
            assert sent == priority and type(sent) is int
        else:
            assert sent == "absent", body
        # What the variant asked for besides stays (here exact_output's ignore_eos, where the dialect has it).
        if dia.enforces_length:
            assert body.get("ignore_eos") is True or body.get("parameters", {}).get("ignore_eos") is True


def test_hosts_that_refuse_unknown_fields_get_the_headers_only() -> None:
    for url in ("https://api.openai.com", "https://mine.openai.azure.com"):
        wire = class_wire(_scenario("openai-chat", url), _scenario("openai-chat", url).variants[0])
        assert wire["batch"] == (b"X-Priority: low\r\n", None)


def test_a_class_priority_joins_the_variants_extra_body_without_changing_it() -> None:
    s = _scenario("openai-chat", extra=", extra_body: {temperature: 0.5}")
    variant = s.variants[0]
    wire = class_wire(s, variant)
    assert wire["batch"][1] == {**variant.extra_body, "priority": 10}
    assert wire["plain"][1] is variant.extra_body  # no priority: the variant's own mapping, as before
    assert "priority" not in variant.extra_body


def test_without_classes_the_request_is_byte_for_byte_what_it_was() -> None:
    s = _scenario("openai-chat", classes="")
    variant = s.variants[0]
    wire = class_wire(s, variant)
    assert wire == {"": (b"", variant.extra_body)}
    spec = sampler_for(s, 0).spec_at(4)
    assert spec.priority_class == ""
    dia = get_dialect("openai-chat")
    assert dia.build_body(spec, "m", True, wire[""][1]) == dia.build_body(spec, "m", True, variant.extra_body)


def test_records_and_raw_rows_carry_the_class() -> None:
    rec = RequestRecord("r1", "a", "chat", "short", sent=1.0, done=2.0, priority_class="batch")
    row = rec.to_json()
    assert row["class"] == "batch"
    assert RequestRecord.from_json(orjson.loads(orjson.dumps(row))).priority_class == "batch"
    plain = RequestRecord("r2", "a", "chat").to_json()
    assert plain["class"] == "" and RequestRecord.from_json(plain).priority_class == ""
