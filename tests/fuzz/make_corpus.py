#!/usr/bin/env python3
"""Writes the fuzzers' seed corpora (tests/fuzz/corpus/<fuzzer>/) and dictionaries.

Seeds are small synthetic inputs, one per shape the parsers know (valid and a few near-misses);
the model configs are the bundled checkpoints' config.json files. Run from anywhere; it rewrites
the corpus folders from scratch, so the committed corpus is exactly what this script makes:
    python3 tests/fuzz/make_corpus.py
"""
import json
import os
import shutil
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CORPUS = os.path.join(HERE, 'corpus')


def write(fuzzer, name, data):
    folder = os.path.join(CORPUS, fuzzer)
    os.makedirs(folder, exist_ok=True)
    if isinstance(data, str):
        data = data.encode('utf-8')
    with open(os.path.join(folder, name), 'wb') as f:
        f.write(data)


# --- safetensors ---------------------------------------------------------------------------
def safetensors(header, data=b''):
    text = json.dumps(header, separators=(',', ':')).encode()
    return struct.pack('<Q', len(text)) + text + data


def tensor(dtype, shape, begin, end):
    return {'dtype': dtype, 'shape': shape, 'data_offsets': [begin, end]}


def safetensors_seeds():
    two_floats = struct.pack('<2f', 1.5, -2.0)
    write('safetensors_fuzzer', 'f32', safetensors({'a': tensor('F32', [2], 0, 8)}, two_floats))
    write('safetensors_fuzzer', 'metadata_bf16_f16',
          safetensors({'__metadata__': {'format': 'pt'}, 'w': tensor('BF16', [1, 2], 0, 4),
                       'h': tensor('F16', [2], 4, 8)},
                      b'\xc0\x3f\x00\xc0' + b'\x00\x3c\x01\x00'))
    write('safetensors_fuzzer', 'ints',
          safetensors({'i': tensor('I32', [2], 0, 8), 'l': tensor('I64', [1], 8, 16)},
                      struct.pack('<2i', 7, -1) + struct.pack('<q', 1 << 40)))
    write('safetensors_fuzzer', 'zero_elements',
          safetensors({'e': tensor('F32', [0, 4], 0, 0), 'x': tensor('I64', [3, 0], 0, 0)}))
    write('safetensors_fuzzer', 'model_like',
          safetensors({'embed.weight': tensor('F32', [4, 2], 0, 32),
                       'layers.0.attn.q.weight': tensor('BF16', [2, 2], 32, 40),
                       'layers.0.attn.q.bias': tensor('F32', [2], 40, 48)},
                      bytes(range(48))))
    write('safetensors_fuzzer', 'overlap',
          safetensors({'a': tensor('F32', [2], 0, 8), 'b': tensor('F32', [2], 4, 12)},
                      bytes(12)))
    write('safetensors_fuzzer', 'truncated', safetensors({'a': tensor('F32', [4], 0, 16)})[:-3])
    write('safetensors_fuzzer', 'empty_header', safetensors({}))
    deep = ('{"__metadata__":{"a":' + '[' * 20000 + ']' * 20000 + '}}').encode()
    write('safetensors_fuzzer', 'nesting_20000', struct.pack('<Q', len(deep)) + deep)


# --- config.json -----------------------------------------------------------------------------
def config_seeds():
    checkpoints = os.path.join(ROOT, 'models', 'checkpoints')
    for name in sorted(os.listdir(checkpoints)):
        path = os.path.join(checkpoints, name, 'config.json')
        if os.path.exists(path):
            with open(path, 'rb') as f:
                write('model_config_fuzzer', name, f.read())
    base = {'architecture': 'decoder', 'vocab_size': 16, 'd_model': 8, 'n_heads': 2, 'd_ff': 16}
    kinds = [{'type': 'softmax'}, {'type': 'window', 'window': 4},
             {'type': 'abc', 'slots': 4, 'shared_control': True},
             {'type': 'rfa', 'features': 4, 'kernel': 'arccos', 'gate': True, 'eps': 1e-6},
             {'type': 't2r', 'features': 4}, {'type': 'elu', 'eps': 1e-6}]
    layers = [{'attention': k} for k in kinds]
    write('model_config_fuzzer', 'every_attention',
          json.dumps(dict(base, activation='relu', decoder_layers=layers)))
    write('model_config_fuzzer', 'encoder_decoder',
          json.dumps(dict(base, architecture='encoder-decoder',
                          decoder_layers=[{'attention': kinds[2], 'cross_attention': kinds[0]}],
                          encoder_layers=[{'attention': kinds[0]}])))
    controls = [{'type': 'abc', 'slots': 4, 'control': 'sigmoid'}, {'type': 'abc', 'slots': 4, 'control': 'relu'},
                {'type': 'abc', 'slots': 4, 'control': 'random', 'seed': 7, 'reduce': 'sum'}]
    write('model_config_fuzzer', 'abc_controls',
          json.dumps(dict(base, decoder_layers=[{'attention': k} for k in controls])))
    more = [{'type': 'abc', 'slots': 4, 'control': 'position', 'max_positions': 32},
            {'type': 'abc', 'slots': 4, 'control': 'block', 'block': 2}, {'type': 'abc', 'slots': 4, 'control': 'cluster'}]
    write('model_config_fuzzer', 'abc_controls_2',
          json.dumps(dict(base, decoder_layers=[{'attention': k} for k in more])))
    # Feature-map cross attention and the dilated window (issue 15).
    crosses = [{'type': 'rfa', 'features': 4, 'kernel': 'gaussian'}, {'type': 't2r', 'features': 4}, {'type': 'elu'}]
    write('model_config_fuzzer', 'cross_and_dilation',
          json.dumps(dict(base, architecture='encoder-decoder',
                          decoder_layers=[{'attention': {'type': 'window', 'window': 3, 'dilation': 2},
                                           'cross_attention': c} for c in crosses],
                          encoder_layers=[{'attention': kinds[0]}])))
    # GMAT encoder (issue 16): every encoder layer gmat, the model-level memory settings.
    write('model_config_fuzzer', 'gmat',
          json.dumps(dict(base, architecture='encoder-decoder',
                          decoder_layers=[{'attention': kinds[0], 'cross_attention': kinds[0]}],
                          encoder_layers=[{'attention': {'type': 'gmat', 'chunk': 4}},
                                          {'attention': {'type': 'gmat'}}],
                          gmat={'memory': 4, 'output': 'all', 'memory_only_layers': 0})))
    write('model_config_fuzzer', 'nesting_20000',
          '{"architecture":"decoder","decoder_layers":' + '[' * 20000 + ']' * 20000 + '}')
    write('model_config_fuzzer', 'bad_heads', json.dumps(dict(base, n_heads=3, decoder_layers=[])))


# --- HTTP bodies -----------------------------------------------------------------------------
def http_seeds():
    completions = {
        'minimal': {'prompt': 'Hello'},
        'full': {'model': 'abc-lm', 'prompt': ['Once upon a time'], 'max_tokens': 32,
                 'temperature': 0.7, 'top_p': 0.9, 'top_k': 40, 'repetition_penalty': 1.1,
                 'seed': 12345, 'stop': ['\n', 'END'], 'stream': True, 'ignore_eos': False,
                 'n': 1, 'best_of': 1},
        'greedy_stop_string': {'prompt': 'x', 'temperature': 0, 'stop': '.', 'max_tokens': 1},
        'bad_types': {'prompt': 5, 'max_tokens': -1, 'temperature': 'hot', 'top_p': 1.5e300},
        'nulls': {'prompt': 'p', 'model': None, 'stop': None, 'seed': 18446744073709551615},
        'echo_logprobs': {'prompt': [464, 1468, 2156], 'echo': True, 'logprobs': 5,
                          'max_tokens': 0},
        'stream_usage': {'prompt': 'x', 'stream': True, 'logprobs': 20,
                         'stream_options': {'include_usage': True}},
    }
    for name, body in completions.items():
        write('http_completion_fuzzer', name, json.dumps(body))
    write('http_completion_fuzzer', 'not_an_object', '["prompt"]')
    write('http_completion_fuzzer', 'invalid_utf8', b'{"prompt":"\xff\xfe"}')
    translations = {
        'single': {'text': 'Hello world.'},
        'batch': {'model': 'abc-en-de', 'texts': ['One.', 'Two.'], 'beam_size': 2,
                  'max_tokens': 16},
        'both': {'text': 'a', 'texts': ['b']},
        'bad_batch': {'texts': ['', 3]},
    }
    for name, body in translations.items():
        write('http_translate_fuzzer', name, json.dumps(body))
    write('http_translate_fuzzer', 'deep', '{"texts":' + '[' * 64 + ']' * 64 + '}')
    # Issue 44: nesting past the limit (engine/core/json_nesting.h) is refused before parsing;
    # 50,000 levels crashed the server (SIGSEGV) when a value this deep was copied or walked.
    write('http_completion_fuzzer', 'nesting_50000',
          '{"prompt":"x","logit_bias":' + '[' * 50000 + ']' * 50000 + '}')
    write('http_completion_fuzzer', 'nesting_at_limit',
          '{"prompt":"x","stop":' + '[' * 255 + ']' * 255 + '}')
    write('http_completion_fuzzer', 'nesting_schema',
          json.dumps({'prompt': 'x', 'response_format': {'type': 'json_schema', 'json_schema': {
              'name': 'n', 'schema': {'type': 'object', 'properties': {'a': {'const': 1}}}}}})
          .replace('{"const": 1}', '{"const": ' + '[' * 60000 + ']' * 60000 + '}'))


# --- gRPC messages (protobuf wire format, abcd/v1/generator.proto) -----------------------------
def varint(n):
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte = n & 0x7f
        n >>= 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def field_varint(number, value):
    return varint(number << 3) + varint(value)


def field_bytes(number, value):
    if isinstance(value, str):
        value = value.encode('utf-8')
    return varint(number << 3 | 2) + varint(len(value)) + value


def field_float(number, value):
    return varint(number << 3 | 5) + struct.pack('<f', value)


def grpc_seeds():
    sampling = (field_float(1, 0.8) + field_varint(2, 40) + field_float(3, 0.95) +
                field_float(4, 1.2) + field_varint(5, 7))
    generate = {
        'minimal': field_bytes(2, 'Hello'),
        'full': (field_bytes(1, 'abc-lm') + field_bytes(2, 'Once upon a time') +
                 field_varint(3, 32) + field_bytes(4, sampling) + field_bytes(5, '\n') +
                 field_bytes(5, 'END')),
        'negative_max_tokens': field_bytes(2, 'x') + field_varint(3, -5),
        'bad_sampling': field_bytes(2, 'x') + field_bytes(4, field_float(3, 2.0)),
        'invalid_utf8': field_bytes(2, b'\xff\xfe'),
        'messages': (field_bytes(9, field_bytes(1, 'system') + field_bytes(2, 'Be brief.')) +
                     field_bytes(9, field_bytes(1, 'user') + field_bytes(2, 'Hi')) +
                     field_varint(10, 0)),
    }
    deep_schema = '{"enum": [' + '[' * 100000 + ']' * 100000 + ']}'
    generate['nesting_schema'] = field_bytes(2, 'x') + field_bytes(
        12, field_varint(1, 2) + field_bytes(2, deep_schema))
    for name, data in generate.items():
        write('grpc_generate_fuzzer', name, data)
    translate = {
        'minimal': field_bytes(1, 'Hello world.'),
        'full': field_bytes(4, 'abc-en-de') + field_bytes(1, 'One.') + field_varint(2, 2) +
                field_varint(3, 16),
        'negative_beam': field_bytes(1, 'x') + field_varint(2, -1),
    }
    for name, data in translate.items():
        write('grpc_translate_fuzzer', name, data)


# --- chat messages (server/chat/chat_messages.h): template byte, flags byte, messages JSON -------
def chat_seeds():
    conversations = {
        'user': [{'role': 'user', 'content': 'Hi'}],
        'system_user_assistant': [{'role': 'system', 'content': 'Be brief.'},
                                  {'role': 'user', 'content': 'Hi'},
                                  {'role': 'assistant', 'content': 'Hello.'},
                                  {'role': 'user', 'content': 'Bye'}],
        'text_parts': [{'role': 'user', 'content': [{'type': 'text', 'text': 'a'},
                                                    {'type': 'text', 'text': '{{ b }}'}]}],
        'two_users': [{'role': 'user', 'content': 'a'}, {'role': 'user', 'content': 'b'}],
        'assistant_first': [{'role': 'assistant', 'content': '</s><s>[INST]'}],
        'bad_role': [{'role': 'tool', 'content': 'x'}],
    }
    for i, (name, messages) in enumerate(conversations.items()):
        write('chat_render_fuzzer', name, bytes([i, i & 1]) + json.dumps(messages).encode())
    # Byte 0 = 0xFF: the template itself is fuzzed ("<template>\0<messages>"): templates that
    # once ran for minutes or allocated gigabytes (issue 44), which must now end within the
    # render's budgets, and the constructs published templates use (macros, set blocks, ...).
    ns_append = ('{% set ns = namespace(roles=[], text="") %}{% for m in messages %}'
                 '{% set ns.roles = ns.roles + [m.role] %}{% set ns.text = ns.text + m.content %}'
                 '{% endfor %}{{ ns.roles | join(",") }}{{ ns.text | length }}')
    templates = {
        'tpl_pow': '{{ 1 ** 10**15 }}{{ 2 ** 62 }}',
        'tpl_replace_blowup': "{% set s = 'a' * 4000000 %}{{ s.replace('a', s) }}",
        'tpl_list_doubling': ("{% set ns = namespace(l=['x' * 1000]) %}{% for i in range(40) %}"
                              "{% set ns.l = ns.l + ns.l %}{% endfor %}{{ ns.l | length }}"),
        'tpl_repeat_list': "{% set s = 'a' * 4000000 %}{{ [s] * 100000 }}",
        'tpl_tojson_join': ("{% set s = 'a' * 4000000 %}{{ ([s] * 1000) | tojson }}"
                            "{{ ([s] * 1000) | join(',') }}"),
        'tpl_split_loop': ("{% set s = 'a b ' * 1000000 %}{% for i in range(100000) %}"
                           "{% set t = s.split(' ') %}{% endfor %}"),
        'tpl_concat_loop': ("{% set s = 'a' * 4000000 %}{% for i in range(100000) %}"
                            "{% set t = s ~ i %}{% endfor %}"),
        'tpl_namespace_append': ns_append,
        'tpl_macro_caller': ('{% macro m(x, y=2) %}<{{ x }}{{ y }}{{ caller() if caller }}>'
                             '{% endmacro %}{% call m(1) %}body{% endcall %}{{ m(3, y=4) }}'
                             '{% set b %}{{ messages | length }}{% endset %}{{ b }}'),
        # Blocks and expressions nested inside a recursive macro: the renderer's recursion is
        # bounded (this overflowed the stack before kMaxNesting).
        'tpl_deep_nesting': ('{% macro m(n) %}' + '{% if true %}' * 60 + '{{ ' + '(' * 55 +
                             'm(n - 1) if n > 0 else 1' + ')' * 55 + ' }}' +
                             '{% endif %}' * 60 + '{% endmacro %}{{ m(100) }}'),
        'tpl_filters': ('{{ messages | map(attribute="role") | reject("equalto", "user") | list }}'
                        '{{ {"b": 1, "a": 2} | dictsort }}{{ strftime_now("%Y") | length }}'
                        '{{ messages | selectattr("role", "in", ["user"]) | list | length }}'),
    }
    conversation = json.dumps([{'role': 'user', 'content': 'Hi'},
                               {'role': 'assistant', 'content': 'Hello'}]).encode()
    for name, source in templates.items():
        write('chat_render_fuzzer', name, b'\xff\x01' + source.encode() + b'\0' + conversation)


# --- session blobs (engine/state/sequence_blob.h, models/FORMAT.md "Session blob") ------------
FUZZ_FINGERPRINT = 0xabcd5e55  # session_blob_fuzzer.cc's tiny layout: 4 fixed floats, 1 KV cache


def snapshot(position, fingerprint=FUZZ_FINGERPRINT, fixed=4, width=2, encoded=0, kv='f32'):
    """A StatePool snapshot of the fuzzer's tiny layout: version 2 with KV rows as fp32 (kv='f32')
    or bf16 ('bf16'), or version 1 ('v1': no format byte, fp32 rows)."""
    magic = b'ABCDSEQ1' if kv == 'v1' else b'ABCDSEQ2'
    out = magic + struct.pack('<QqqBq', fingerprint, position, 0, encoded, fixed)
    out += struct.pack('<%df' % fixed, *[0.25 * i for i in range(fixed)])
    out += struct.pack('<qq', 1, position)
    if kv != 'v1':
        out += struct.pack('<B', 1 if kv == 'bf16' else 0)
    values = position * width
    if kv == 'bf16':  # the upper halves of the fp32 values below
        out += struct.pack('<%dH' % values, *[struct.unpack('<I', struct.pack('<f', 0.5 * i))[0] >> 16
                                              for i in range(values)])
        out += struct.pack('<%dH' % values, *[struct.unpack('<I', struct.pack('<f', -0.5 * i))[0] >> 16
                                              for i in range(values)])
    else:
        out += struct.pack('<%df' % values, *[0.5 * i for i in range(values)])  # keys
        out += struct.pack('<%df' % values, *[-0.5 * i for i in range(values)])  # values
    return out


def blob_checksum(data):
    """SequenceBlobChecksum: four FNV-1a lanes over 8-byte little-endian words (word i into lane
    i % 4), the tail bytes into lane 0, then the length and the lanes folded together."""
    mask, prime = (1 << 64) - 1, 0x100000001b3
    lanes = [0xcbf29ce484222325, 0x84222325cbf29ce5, 0x9e3779b97f4a7c15, 0xc2b2ae3d27d4eb4f]
    words = len(data) // 8
    for i in range(words):
        (word,) = struct.unpack_from('<Q', data, 8 * i)
        lanes[i % 4] = ((lanes[i % 4] ^ word) * prime) & mask
    for b in data[8 * words:]:
        lanes[0] = ((lanes[0] ^ b) * prime) & mask
    h = len(data)
    for lane in lanes:
        h = ((h ^ lane) * prime) & mask
    return h


def session_blob(model, tokens, folded, state, fingerprint=FUZZ_FINGERPRINT, version=1,
                 token_count=None):
    model = model.encode()
    body = (b'ABCDSESS' + struct.pack('<II', version, len(model)) + model +
            struct.pack('<QQ', fingerprint, len(tokens) if token_count is None else token_count) +
            struct.pack('<%di' % len(tokens), *tokens) + struct.pack('<qQ', folded, len(state)) +
            state)
    return body + struct.pack('<Q', blob_checksum(body))


def session_blob_seeds():
    tokens = [1, 17, 4, 99, 5, 23, 8]
    valid = session_blob('abc-lm', tokens, 5, snapshot(5))
    seeds = {
        'valid': valid,
        'valid_empty': session_blob('', [], 0, snapshot(0)),
        'valid_all_folded': session_blob('abc-lm', tokens, 7, snapshot(7)),
        'valid_long': session_blob('m' * 256, list(range(100)), 40, snapshot(40)),
        'valid_state_v1': session_blob('abc-lm', tokens, 5, snapshot(5, kv='v1')),
        'valid_bf16_rows': session_blob('abc-lm', tokens, 5, snapshot(5, kv='bf16')),
        'other_model_state': session_blob('other', tokens, 5, snapshot(5, fingerprint=99),
                                          fingerprint=99),
        'bad_encoded_flag': session_blob('abc-lm', tokens, 5, snapshot(5, encoded=7)),
        'wrong_fixed_size': session_blob('abc-lm', tokens, 5, snapshot(5, fixed=3)),
        'truncated': valid[:-11],
        'corrupt_byte': valid[:40] + bytes([valid[40] ^ 0x10]) + valid[41:],
        'version_2': session_blob('abc-lm', tokens, 5, snapshot(5), version=2),
        'folded_past_end': session_blob('abc-lm', tokens, 9, snapshot(9)),
        'negative_token': session_blob('abc-lm', [1, -3, 4], 2, snapshot(2)),
        'huge_token_count': session_blob('abc-lm', tokens, 5, snapshot(5), token_count=1 << 60),
        'state_position_mismatch': session_blob('abc-lm', tokens, 5, snapshot(4)),
        'bare_snapshot': snapshot(3),
    }
    for name, data in seeds.items():
        write('session_blob_fuzzer', name, data)


def main():
    shutil.rmtree(CORPUS, ignore_errors=True)
    safetensors_seeds()
    config_seeds()
    http_seeds()
    grpc_seeds()
    session_blob_seeds()
    chat_seeds()
    for fuzzer in sorted(os.listdir(CORPUS)):
        print(fuzzer, len(os.listdir(os.path.join(CORPUS, fuzzer))), 'seeds')


if __name__ == '__main__':
    main()
