#!/bin/sh
# The end-to-end MCP test: the official MCP TypeScript SDK client (@modelcontextprotocol/sdk, the
# version pinned in package.json and package-lock.json beside this script) starts `megasched mcp`
# over stdio, lists its tools and resources, calls propose, evaluate and loop on the `toy` model,
# cancels a loop, and checks the verdicts (sdk_client.mjs).
#
#   sh tests/mcp/sdk_client_test.sh MEGASCHED_BINARY WORK_DIR
#
# The SDK is installed into WORK_DIR (the build tree; `npm ci`, once per pinned version). Exit 77
# (ctest: skipped) with a message when node or npm is not on PATH; any other failure fails.
set -eu
for tool in node npm; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "SKIP: the MCP SDK test needs node and npm on PATH; '$tool' is not there"
    exit 77
  fi
done
binary=$1
work=$2
here=$(cd "$(dirname "$0")" && pwd)
pinned=$(node -p "require('$here/package.json').dependencies['@modelcontextprotocol/sdk']")
mkdir -p "$work"
installed=$(node -p "try { require('$work/node_modules/@modelcontextprotocol/sdk/package.json').version } catch (e) { '' }")
if [ "$installed" != "$pinned" ] || ! cmp -s "$here/package-lock.json" "$work/package-lock.json"; then
  echo "installing @modelcontextprotocol/sdk@$pinned into $work"
  cp "$here/package.json" "$here/package-lock.json" "$work/"
  (cd "$work" && npm ci --no-audit --no-fund --loglevel=error)
fi
cp "$here/sdk_client.mjs" "$work/"
node "$work/sdk_client.mjs" "$binary"
