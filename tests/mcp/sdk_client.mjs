// The official MCP TypeScript SDK client against `megasched mcp` (run by sdk_client_test.sh):
//   node sdk_client.mjs MEGASCHED_BINARY
// Connects over stdio (the SDK asks for its latest protocol version; the server answers with its
// own), lists the tools and resources, calls propose then evaluate on the `toy` model and checks
// the verdict against the CLI's (the SDK itself checks structuredContent against each tool's
// outputSchema), checks the errors, runs a loop with progress, cancels one, and checks the logs.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { ErrorCode, McpError } from "@modelcontextprotocol/sdk/types.js";

const binary = process.argv[2];
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "ms_mcp_sdk_"));
const results = path.join(dir, "results.tsv");
const corpus = path.join(dir, "corpus.jsonl");
const step = (what) => console.log(`sdk_client: ${what}`);

const transport = new StdioClientTransport({
  command: binary,
  args: ["mcp", "--results", results, "--corpus", corpus, "--report-html", path.join(dir, "report.html")],
  stderr: "inherit",
});
const client = new Client({ name: "megasched-sdk-test", version: "1.0.0" });
await client.connect(transport);
assert.equal(client.getServerVersion().name, "megasched");
assert.ok(client.getServerCapabilities().tools);
assert.ok(client.getServerCapabilities().resources);
step("connected to " + JSON.stringify(client.getServerVersion()));

// The tools, each with an input schema (and the SDK caches evaluate's and propose's output schemas).
const { tools } = await client.listTools();
assert.deepEqual(tools.map((t) => t.name), ["propose", "evaluate", "validate", "loop", "report", "profile",
                                           "promote", "registry_list", "registry_show"]);
for (const t of tools) assert.equal(t.inputSchema.type, "object", t.name);
assert.equal(tools.find((t) => t.name === "evaluate").outputSchema.title, "Verdict");
step("tools: " + tools.map((t) => t.name).join(", "));

// propose, edit the incumbent, evaluate it: the verdict the CLI gives for the same config.
const proposed = await client.callTool({ name: "propose", arguments: { model: "toy", gpu: "h100" } });
assert.equal(proposed.isError, false);
const config = proposed.structuredContent.incumbent;
assert.ok(proposed.structuredContent.search_space.knobs.length > 10);
config.kernel.unroll = 4;
const progress = [];
const evaluated = await client.callTool(
  { name: "evaluate", arguments: { model: "toy", gpu: "h100", device: "cpu", config } },
  undefined,
  { onprogress: (p) => progress.push(p) },
);
assert.equal(evaluated.isError, false);
const verdict = evaluated.structuredContent;
assert.equal(verdict.valid, true);
assert.equal(verdict.correct, true);
assert.equal(verdict.status, "ok");
assert.equal(verdict.latency_kind, "predicted");
assert.equal(typeof verdict.latency_us, "number");
assert.ok(verdict.latency_us >= verdict.floor_us);
assert.match(verdict.schedule_id, /^[0-9a-f]{16}$/);
assert.deepEqual(JSON.parse(evaluated.content[0].text), verdict);
// The SDK hands notifications to onprogress a tick later than it settles a response, so progress
// sent right before the response can be dropped on the client's side: check the first ones.
assert.equal(progress[0]?.progress, 0);
const cli = JSON.parse(
  execFileSync(binary, ["evaluate", "--model", "toy", "--gpu", "h100", "--device", "cpu", "--config", "-"], {
    input: JSON.stringify(config),
  }),
);
// Equal but for wall times (breakdown_ms, where the verdict has it) and the reference's origin
// (reference: its load time and whether the disk cache held it differ from run to run).
const { breakdown_ms: _a, reference: _c, ...mcpVerdict } = verdict;
const { breakdown_ms: _b, reference: _d, ...cliVerdict } = cli;
assert.deepEqual(mcpVerdict, cliVerdict);
step(`evaluate: ${evaluated.content[1].text}`);

// Errors: arguments that fail the schema are a JSON-RPC error naming the path; a bad model is a
// tool result with isError; neither ends the session.
await assert.rejects(
  client.callTool({ name: "evaluate", arguments: { config: { kernel: { unroll: 3 } } } }),
  (e) => e instanceof McpError && e.code === ErrorCode.InvalidParams && e.message.includes("/config/kernel/unroll"),
);
await assert.rejects(
  client.callTool({ name: "no_such_tool", arguments: {} }),
  (e) => e instanceof McpError && e.code === ErrorCode.InvalidParams,
);
const failed = await client.callTool({ name: "evaluate", arguments: { model: "no-such-model" } });
assert.equal(failed.isError, true);
assert.match(failed.content[0].text, /no-such-model/);
await client.ping();
step("errors: invalid params and isError results, session still up");

// A loop: one progress notification per trial, every trial logged.
const loopProgress = [];
const looped = await client.callTool(
  { name: "loop", arguments: { model: "toy", device: "cpu", budget: 3 } },
  undefined,
  { onprogress: (p) => loopProgress.push(p) },
);
assert.equal(looped.isError, false);
assert.equal(looped.structuredContent.trials, 3);
const values = loopProgress.map((p) => p.progress);
assert.equal(values[0], 0);
assert.ok(values.length >= 2, JSON.stringify(values));
assert.ok(values.every((v, i) => i === 0 || v > values[i - 1]), JSON.stringify(values));
assert.ok(loopProgress.every((p) => p.total === 3 && p.progress <= 3));
assert.ok(loopProgress.slice(1).every((p) => /^trial +\d+\/3/.test(p.message)), JSON.stringify(loopProgress));
step(`loop: ${looped.content[1].text}`);

// Cancelling a long loop through the SDK (notifications/cancelled): the call rejects, the server
// stops the trial in flight and stays up, and the logs hold whole trials only.
const controller = new AbortController();
const cancelled = client.callTool(
  { name: "loop", arguments: { model: "toy", device: "cpu", budget: 1000, strategy: "random", resume: false } },
  undefined,
  {
    signal: controller.signal,
    timeout: 600000,
    onprogress: (p) => {
      if (p.progress >= 3) controller.abort("enough");
    },
  },
);
await assert.rejects(cancelled);
await client.ping();
// evaluate waits for the device, which the cancelled loop holds until it has wound down.
await client.callTool({ name: "evaluate", arguments: { config: "default" } });
const rows = fs.readFileSync(results, "utf8").trim().split("\n").slice(1);
const records = fs.readFileSync(corpus, "utf8").trim().split("\n").map((line) => JSON.parse(line));
assert.equal(rows.length, records.length);
assert.ok(rows.length >= 3 + 2 && rows.length < 3 + 1000, `${rows.length} rows`);  // trial 0 is known: adopted, not logged
step(`cancel: the loop stopped after ${rows.length - 3} trials; ${rows.length} rows, ${records.length} records`);

// Resources: the contract, the schemas, the results.
const { resources } = await client.listResources();
const uris = resources.map((r) => r.uri);
for (const uri of ["megasched://docs/HARNESS.md", "megasched://schemas/verdict.schema.json", "megasched://workspace/results.tsv"])
  assert.ok(uris.includes(uri), uri);
const harness = await client.readResource({ uri: "megasched://docs/HARNESS.md" });
assert.match(harness.contents[0].text, /^# HARNESS\.md/);
const tsv = await client.readResource({ uri: "megasched://workspace/results.tsv" });
assert.equal(tsv.contents[0].text, fs.readFileSync(results, "utf8"));
step(`resources: ${uris.length}`);

await client.close();
fs.rmSync(dir, { recursive: true, force: true });
step("ok");
