// The official OpenAI Node SDK (`openai`, pinned in package-lock.json) against a running
// abcd-server: chat completions plain, streamed with stream_options.include_usage, n, logprobs
// with top_logprobs, response_format json_schema (JSON.parse of the content), tools (auto, a
// named tool_choice plain, streamed and through the SDK's runTools helper, "required" over two
// tools, a call sent back with its result), and a 400 naming
// the field, each checked with node:assert on the shapes the
// SDK's types promise. Usage: node chat.mjs http://127.0.0.1:PORT/v1 [tools]
// (tools: only the tool cases, for a model whose chat template shows the tools, e.g. the real
// Llama-3.1 or Qwen2.5 one: hf_serving_e2e_test.cc).
// Prints one JSON line on success, {"model", "messages", "max_tokens", "content"} (the greedy
// answer), for the caller's exact-text check against the token ids (openai_e2e_test.cc);
// exits 1 with the failed assertion on stderr otherwise.
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const baseURL = process.argv[2];
assert.ok(baseURL, 'usage: node chat.mjs BASE_URL');
const client = new OpenAI({ baseURL, apiKey: 'unused', maxRetries: 0, timeout: 60_000 });

const messages = [
  { role: 'system', content: 'You tell short stories.' },
  { role: 'user', content: 'Tell me about the old house.' },
];
const maxTokens = 12;

const weather = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'The weather in a city over the next days.',
    parameters: {
      type: 'object',
      properties: { city: { enum: ['Paris', 'Oslo', 'Rome'] }, days: { type: 'integer' } },
      required: ['city', 'days'],
      additionalProperties: false,
    },
  },
};

// Tools. With tool_choice auto the built-in template (abc-lm ships none) does not show them,
// and the answer is not a call: the same content as without tools (`plainContent`; null for a
// model whose template shows them: then a call or content).
async function toolCases(model, plainContent) {
  const auto = await client.chat.completions.create({
    model, messages, max_completion_tokens: maxTokens, temperature: 0, tools: [weather],
  });
  if (plainContent !== null) {
    assert.equal(auto.choices[0].message.content, plainContent);
    assert.equal(auto.choices[0].message.tool_calls, undefined);
  } else if (auto.choices[0].finish_reason === 'tool_calls') {  // a template that shows them
    for (const c of auto.choices[0].message.tool_calls) {
      assert.equal(c.function.name, 'get_weather');
      assert.equal(typeof JSON.parse(c.function.arguments), 'object');
    }
  } else {
    assert.equal(typeof auto.choices[0].message.content, 'string');
  }
  // A named tool_choice is enforced (constrained decoding): even this small model answers with
  // a valid call of the function, finish_reason tool_calls, plain and streamed (the SDK's stream
  // helper accumulates delta.tool_calls into the same call).
  const tool_choice = { type: 'function', function: { name: 'get_weather' } };
  const forced = {
    model, messages, max_completion_tokens: 100, temperature: 0, tools: [weather], tool_choice,
  };
  const called = await client.chat.completions.create(forced);
  assert.equal(called.choices[0].finish_reason, 'tool_calls');
  assert.equal(called.choices[0].message.content, null);
  assert.equal(called.choices[0].message.tool_calls.length, 1);
  const [call] = called.choices[0].message.tool_calls;
  assert.match(call.id, /^call_[A-Za-z0-9]{24}$/);
  assert.equal(call.type, 'function');
  assert.equal(call.function.name, 'get_weather');
  const args = JSON.parse(call.function.arguments);
  assert.deepEqual(Object.keys(args), ['city', 'days']);
  assert.ok(['Paris', 'Oslo', 'Rome'].includes(args.city), args.city);
  assert.ok(Number.isInteger(args.days), String(args.days));
  const calledStream = client.chat.completions.stream(forced);
  const streamedCall = await calledStream.finalChatCompletion();
  assert.equal(streamedCall.choices[0].finish_reason, 'tool_calls');
  assert.deepEqual(streamedCall.choices[0].message.tool_calls.map((c) => c.function),
    [call.function]);
  // The SDK's runTools helper: it sends the tools, gets the forced call, runs the function with
  // the parsed arguments and stops (one named function to call).
  let ran = null;
  const runner = client.chat.completions.runTools({
    model, messages, max_completion_tokens: 100, temperature: 0, tool_choice,
    tools: [{
      type: 'function',
      function: {
        ...weather.function,
        function: (parsed) => { ran = parsed; return `sunny in ${parsed.city}`; },
        parse: JSON.parse,
      },
    }],
  });
  assert.equal(await runner.finalFunctionToolCallResult(), `sunny in ${args.city}`);
  assert.deepEqual(ran, args);
  // tool_choice "required" over two tools: one valid call of either, whichever the model picks,
  // over 20 seeds at temperature 1 (the name written first picks the arguments' schema).
  const clock = {
    type: 'function',
    function: {
      name: 'get_time',
      parameters: {
        type: 'object',
        properties: { zone: { enum: ['UTC', 'CET'] } },
        required: ['zone'],
        additionalProperties: false,
      },
    },
  };
  const names = new Set();
  for (let seed = 1; seed <= 20; seed++) {
    const required = await client.chat.completions.create({
      model, messages, max_completion_tokens: 100, temperature: 1, seed,
      tools: [weather, clock], tool_choice: 'required',
    });
    assert.equal(required.choices[0].finish_reason, 'tool_calls');
    const [only] = required.choices[0].message.tool_calls;
    const parsed = JSON.parse(only.function.arguments);
    names.add(only.function.name);
    if (only.function.name === 'get_weather') {
      assert.deepEqual(Object.keys(parsed), ['city', 'days']);
      assert.ok(['Paris', 'Oslo', 'Rome'].includes(parsed.city), parsed.city);
    } else {
      assert.equal(only.function.name, 'get_time');
      assert.deepEqual(Object.keys(parsed), ['zone']);
      assert.ok(['UTC', 'CET'].includes(parsed.zone), parsed.zone);
    }
  }
  assert.ok(names.size >= 1);
  // The call sent back (content null, arguments as JSON text) with the tool's result renders.
  const followUp = await client.chat.completions.create({
    model, max_completion_tokens: 4, temperature: 0, tools: [weather, clock],
    messages: [...messages, called.choices[0].message,
      { role: 'tool', tool_call_id: call.id, content: 'sunny' }],
  });
  assert.ok(followUp.usage.prompt_tokens > called.usage.prompt_tokens, JSON.stringify(followUp.usage));
}

async function main() {
  const models = await client.models.list();
  const model = models.data[0].id;
  assert.ok(model, 'GET /v1/models lists the served model');
  if (process.argv[3] === 'tools') {  // the tool cases only
    await toolCases(model, null);
    console.log(JSON.stringify({ model, tools: 'ok' }));
    return;
  }

  // Plain, greedy.
  const plain = await client.chat.completions.create({
    model, messages, max_completion_tokens: maxTokens, temperature: 0,
  });
  assert.equal(plain.object, 'chat.completion');
  assert.match(plain.id, /^chatcmpl-/);
  assert.equal(plain.model, model);
  assert.equal(plain.choices.length, 1);
  const answer = plain.choices[0];
  assert.equal(answer.index, 0);
  assert.equal(answer.message.role, 'assistant');
  assert.equal(typeof answer.message.content, 'string');
  assert.ok(answer.message.content.length > 0, 'a non-empty answer');
  assert.ok(['length', 'stop'].includes(answer.finish_reason), answer.finish_reason);
  assert.equal(answer.logprobs, null);
  const { usage } = plain;
  assert.ok(usage.prompt_tokens > 0 && usage.completion_tokens > 0);
  assert.ok(usage.completion_tokens <= maxTokens);
  assert.equal(usage.total_tokens, usage.prompt_tokens + usage.completion_tokens);

  // SSE with include_usage: the same greedy text, the role first, usage in a last chunk with
  // no choices (and null on every other chunk).
  const stream = await client.chat.completions.create({
    model, messages, max_completion_tokens: maxTokens, temperature: 0, stream: true,
    stream_options: { include_usage: true },
  });
  const chunks = [];
  for await (const chunk of stream) chunks.push(chunk);
  assert.ok(chunks.length >= 3, `${chunks.length} chunks`);
  const last = chunks.at(-1);
  assert.deepEqual(last.choices, []);
  for (const key of ['prompt_tokens', 'completion_tokens', 'total_tokens']) {
    assert.equal(last.usage[key], usage[key], key);  // cached_tokens: the prefix cache's
  }
  let streamed = '';
  let finish = null;
  chunks.slice(0, -1).forEach((chunk, i) => {
    assert.equal(chunk.object, 'chat.completion.chunk');
    assert.equal(chunk.id, chunks[0].id);
    assert.equal(chunk.usage, null);
    assert.equal(chunk.choices.length, 1);
    const { delta } = chunk.choices[0];
    if (i === 0) assert.equal(delta.role, 'assistant');
    else assert.equal(delta.role, undefined);
    streamed += delta.content ?? '';
    if (chunk.choices[0].finish_reason) finish = chunk.choices[0].finish_reason;
  });
  assert.equal(streamed, answer.message.content);
  assert.equal(finish, answer.finish_reason);

  // n = 2, sampled with a seed: two choices, indices 0 and 1, each with text; the same seed
  // gives the same two answers.
  const sampled = { model, messages, max_tokens: 8, temperature: 1, seed: 7, n: 2 };
  const two = await client.chat.completions.create(sampled);
  assert.deepEqual(two.choices.map((c) => c.index).sort(), [0, 1]);
  for (const c of two.choices) assert.equal(typeof c.message.content, 'string');
  const again = await client.chat.completions.create(sampled);
  assert.deepEqual(again.choices.map((c) => c.message.content),
    two.choices.map((c) => c.message.content));

  // logprobs + top_logprobs, greedy: each chosen token is its top-1, the tokens join to the
  // content, bytes are the token's UTF-8.
  const scored = await client.chat.completions.create({
    model, messages, max_completion_tokens: maxTokens, temperature: 0, logprobs: true,
    top_logprobs: 3,
  });
  const { content } = scored.choices[0].logprobs;
  assert.equal(content.length, scored.usage.completion_tokens);
  assert.equal(content.map((t) => t.token).join(''), answer.message.content);
  for (const t of content) {
    assert.ok(t.logprob <= 0);
    assert.deepEqual(t.bytes, [...Buffer.from(t.token, 'utf8')]);
    assert.ok(t.top_logprobs.length >= 1 && t.top_logprobs.length <= 3);
    assert.equal(t.top_logprobs[0].token, t.token);
    assert.ok(Math.abs(t.top_logprobs[0].logprob - t.logprob) < 1e-6);
    for (let k = 1; k < t.top_logprobs.length; ++k) {
      assert.ok(t.top_logprobs[k].logprob <= t.top_logprobs[k - 1].logprob);
    }
  }

  // response_format json_schema (OpenAI's shape): the content is JSON of the schema's shape,
  // plain and streamed, for both of n = 2 choices.
  const schema = {
    type: 'object',
    properties: {
      title: { type: 'string' },
      year: { type: 'integer' },
      genre: { enum: ['story', 'poem'] },
    },
    required: ['title', 'year', 'genre'],
    additionalProperties: false,
  };
  const response_format = {
    type: 'json_schema', json_schema: { name: 'story', schema, strict: true },
  };
  const shaped = await client.chat.completions.create({
    model, messages, max_completion_tokens: 200, temperature: 1, seed: 3, n: 2, response_format,
  });
  assert.equal(shaped.choices.length, 2);
  for (const c of shaped.choices) {
    assert.equal(c.finish_reason, 'stop', c.message.content);
    const value = JSON.parse(c.message.content);
    assert.deepEqual(Object.keys(value), ['title', 'year', 'genre']);
    assert.equal(typeof value.title, 'string');
    assert.ok(Number.isInteger(value.year), String(value.year));
    assert.ok(['story', 'poem'].includes(value.genre), value.genre);
  }
  const shapedStream = await client.chat.completions.create({
    model, messages, max_completion_tokens: 200, temperature: 1, seed: 3, response_format,
    stream: true,
  });
  let shapedText = '';
  for await (const chunk of shapedStream) shapedText += chunk.choices[0]?.delta?.content ?? '';
  assert.equal(shapedText, shaped.choices[0].message.content);

  await toolCases(model, answer.message.content);

  // Errors: the SDK's BadRequestError with the server's message naming the field.
  const refusals = [
    [{ messages: [{ role: 'robot', content: 'x' }] }, 'messages[0].role'],
    [{ messages, top_logprobs: 2 }, 'top_logprobs'],
    [{ messages, max_completion_tokens: 0 }, 'max_completion_tokens'],
    [{
      messages,
      response_format: {
        type: 'json_schema',
        json_schema: { name: 'x', schema: { type: 'string', not: { const: 'a' } } },
      },
    }, 'response_format.json_schema.schema.not is not supported'],
    [{ messages, tools: [{ type: 'function', function: { name: 'a b' } }] },
      'tools[0].function.name'],
    [{ messages, tools: [weather], tool_choice: { type: 'function', function: { name: 'x' } } },
      'tool_choice.function.name'],
  ];
  for (const [body, field] of refusals) {
    await assert.rejects(client.chat.completions.create({ model, ...body }), (error) => {
      assert.ok(error instanceof OpenAI.BadRequestError, String(error));
      assert.equal(error.status, 400);
      assert.ok(error.message.includes(field), `${error.message} names ${field}`);
      return true;
    });
  }
  await assert.rejects(client.chat.completions.create({ model: 'no-such-model', messages }),
    (error) => error instanceof OpenAI.NotFoundError && error.code === 'model_not_found');

  console.log(JSON.stringify({
    model, messages, max_tokens: maxTokens, content: answer.message.content,
  }));
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
