"""Reads an OTLP profiles export request with the OpenTelemetry project's own Python types
(PyPI `opentelemetry-proto`), checks that every index in it resolves, and prints what the Rust
tests compare with the recording, as JSON.

Usage: python3 otlp_judge.py FILE [--json]   (--json: FILE is OTLP/JSON, else binary protobuf)
Exit 1 with a message on stderr when the request is not valid."""

import json
import sys

from google.protobuf import json_format
from opentelemetry.proto.collector.profiles.v1development.profiles_service_pb2 import (
    ExportProfilesServiceRequest,
)


def fail(message):
    sys.stderr.write("otlp judge: " + message + "\n")
    sys.exit(1)


def main():
    path = sys.argv[1]
    request = ExportProfilesServiceRequest()
    with open(path, "rb") as f:
        data = f.read()
    if "--json" in sys.argv[2:]:
        json_format.Parse(data.decode("utf-8"), request)
    else:
        request.ParseFromString(data)
        if request.SerializeToString() != data:
            # Field order may differ between encoders; what matters is that nothing was unknown.
            reparsed = ExportProfilesServiceRequest()
            reparsed.ParseFromString(request.SerializeToString())
            if reparsed != request:
                fail("the message does not survive a round trip")
    d = request.dictionary
    strings = list(d.string_table)

    def string(i, what):
        if not 0 <= i < len(strings):
            fail(f"{what}: string index {i} out of {len(strings)}")
        return strings[i]

    def attribute(i):
        if not 0 < i < len(d.attribute_table):
            fail(f"attribute index {i} out of {len(d.attribute_table)}")
        a = d.attribute_table[i]
        value = a.value.int_value if a.value.HasField("int_value") else a.value.string_value
        return string(a.key_strindex, "attribute key"), value

    for f in d.function_table:
        string(f.name_strindex, "function name")
        string(f.system_name_strindex, "function system name")
    for loc in d.location_table[1:]:
        if not 0 <= loc.mapping_index < len(d.mapping_table):
            fail(f"mapping index {loc.mapping_index}")
        if not loc.lines:
            fail("a location without lines")
        for line in loc.lines:
            if not 0 < line.function_index < len(d.function_table):
                fail(f"function index {line.function_index} out of {len(d.function_table)}")
    for stack in d.stack_table:
        for i in stack.location_indices:
            if not 0 < i < len(d.location_table):
                fail(f"location index {i} out of {len(d.location_table)}")
    resource = {}
    profiles = []
    for rp in request.resource_profiles:
        for kv in rp.resource.attributes:
            v = kv.value
            resource[kv.key] = v.string_value if v.HasField("string_value") else v.int_value
        for sp in rp.scope_profiles:
            for p in sp.profiles:
                out = {
                    "type": string(p.sample_type.type_strindex, "sample type"),
                    "unit": string(p.sample_type.unit_strindex, "sample unit"),
                    "period": p.period,
                    "time_unix_nano": p.time_unix_nano,
                    "duration_nano": p.duration_nano,
                    "values": 0,
                    "sum": 0,
                    "min_timestamp": None,
                    "max_timestamp": None,
                    "threads": {},
                    "thread_ids": {},
                    "spans": {},
                    "max_depth": 0,
                    "functions": {},
                }
                for s in p.samples:
                    if not 0 < s.stack_index < len(d.stack_table):
                        fail(f"stack index {s.stack_index} out of {len(d.stack_table)}")
                    if len(s.values) != len(s.timestamps_unix_nano):
                        fail("a sample's values and timestamps differ in number")
                    attrs = dict(attribute(i) for i in s.attribute_indices)
                    n = len(s.values)
                    out["values"] += n
                    out["sum"] += sum(s.values)
                    for t in s.timestamps_unix_nano:
                        if out["min_timestamp"] is None or t < out["min_timestamp"]:
                            out["min_timestamp"] = t
                        if out["max_timestamp"] is None or t > out["max_timestamp"]:
                            out["max_timestamp"] = t
                    thread = attrs.get("thread.name")
                    if thread is not None:
                        out["threads"][thread] = out["threads"].get(thread, 0) + n
                        ids = out["thread_ids"].setdefault(thread, [])
                        if attrs.get("thread.id") not in ids:
                            ids.append(attrs.get("thread.id"))
                    span = attrs.get("recorder.span.name")
                    if span is not None:
                        out["spans"][span] = out["spans"].get(span, 0) + n
                    locations = d.stack_table[s.stack_index].location_indices
                    depth = sum(len(d.location_table[i].lines) for i in locations)
                    out["max_depth"] = max(out["max_depth"], depth)
                    leaf = d.location_table[locations[0]].lines[0]
                    name = strings[d.function_table[leaf.function_index].name_strindex]
                    out["functions"][name] = out["functions"].get(name, 0) + n
                profiles.append(out)
    print(json.dumps({"resource": resource, "profiles": profiles}))


main()
