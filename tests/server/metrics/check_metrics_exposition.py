#!/usr/bin/env python3
"""The server's Prometheus exposition parsed by Prometheus' reference parser.

Usage: check_metrics_exposition.py METRICS_TEST_BINARY (ctest `metrics_exposition_parses`).
Runs the metrics_test case ServerMetrics.ExpositionForReferenceParser, which writes a rendered
ServerMetrics to $ABCD_METRICS_DUMP; python3-prometheus-client's parser must then find every
contract family, typed, with only the sample names its type allows, and the values that case
recorded.
"""
import os, subprocess, sys, tempfile
from prometheus_client.parser import text_string_to_metric_families

with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, 'metrics.txt')
    subprocess.run([sys.argv[1], '--gtest_filter=ServerMetrics.ExpositionForReferenceParser'],
                   env=dict(os.environ, ABCD_METRICS_DUMP=path), check=True,
                   stdout=subprocess.DEVNULL)
    with open(path, encoding='utf-8') as f:
        text = f.read()

expected = {
    'abcd_requests': 'counter', 'abcd_prompt_tokens': 'counter',
    'abcd_generated_tokens': 'counter',
    'abcd_time_to_first_token_seconds': 'histogram',
    'abcd_inter_token_latency_seconds': 'histogram',
    'abcd_request_duration_seconds': 'histogram', 'abcd_batch_size': 'histogram',
    'abcd_running_sequences': 'gauge', 'abcd_waiting_requests': 'gauge',
    'abcd_state_bytes_in_use': 'gauge', 'abcd_state_bytes_capacity': 'gauge',
    'abcd_kv_cache_bytes': 'gauge', 'abcd_kv_cache_spare_bytes': 'gauge',
    'abcd_state_bytes_per_sequence': 'gauge',
    'abcd_prefix_cache_bytes': 'gauge', 'abcd_prefix_cache_entries': 'gauge',
    'abcd_prefix_cache_queried_tokens': 'counter', 'abcd_prefix_cache_hit_tokens': 'counter',
    'abcd_prefix_cache_evictions': 'counter',
    'abcd_prefix_cache_lookups': 'counter', 'abcd_prefix_cache_miss_tokens': 'counter',
    'abcd_speculative_draft_tokens': 'counter', 'abcd_speculative_accepted_tokens': 'counter',
    'abcd_prefill_overdue_iterations': 'counter',
}
families = {}
for family in text_string_to_metric_families(text):
    assert family.name not in families, 'family split or repeated: ' + family.name
    families[family.name] = family
assert set(families) == set(expected), sorted(set(families) ^ set(expected))
suffixes = {'counter': ['_total'], 'gauge': [''], 'histogram': ['_bucket', '_sum', '_count']}
for name, family in families.items():
    assert family.type == expected[name], (name, family.type)
    assert family.documentation, name
    allowed = {name + s for s in suffixes[family.type]}
    seen = {s.name for s in family.samples}
    assert seen == allowed, (name, seen)
    if family.type == 'histogram':
        buckets = [s for s in family.samples if s.name == name + '_bucket']
        counts = [s.value for s in buckets]
        assert counts == sorted(counts), (name, counts)
        assert buckets[-1].labels['le'] == '+Inf', name
        count = [s.value for s in family.samples if s.name == name + '_count']
        assert count == [counts[-1]], (name, count, counts)

requests = {(s.labels['kind'], s.labels['status']): s.value
            for s in families['abcd_requests'].samples}
assert len(requests) == 70, len(requests)  # 7 kinds (chat included) x 10 statuses
assert requests['generate', 'ok'] == 3, requests
assert requests['translate', 'deadline_exceeded'] == 1, requests
assert families['abcd_prompt_tokens'].samples[0].value == 14
assert families['abcd_generated_tokens'].samples[0].value == 18
assert families['abcd_running_sequences'].samples[0].value == 4
assert families['abcd_state_bytes_capacity'].samples[0].value == 2 ** 31
odd = 'odd ' + chr(34) + 'model' + chr(34) + ' ' + chr(92) + ' name' + chr(10) + 'line2'
per_sequence = {s.labels['model']: s.value
                for s in families['abcd_state_bytes_per_sequence'].samples}
assert per_sequence == {'abc-lm-untrained': 24576, odd: 2 ** 20}, per_sequence
duration = {s.labels['le']: s.value for s in families['abcd_request_duration_seconds'].samples
            if s.name.endswith('_bucket')}
assert duration['60'] == 1 and duration['+Inf'] == 2, duration
print('metrics exposition parses:', len(families), 'families')
