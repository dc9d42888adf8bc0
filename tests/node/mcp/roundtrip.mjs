// The MCP TypeScript SDK against devyard's mcpUrl (run by tests/e2e/test_up_mcp.py):
// list the tools, observe, tap the Settings icon by its element id, observe again.
// Usage: node roundtrip.mjs MCP_URL BEARER ; prints one JSON line, exits non-zero on failure.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [url, token] = process.argv.slice(2);
const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `Bearer ${token}` } },
});
const client = new Client({ name: "devyard-test", version: "1.0.0" });
await client.connect(transport);

const walk = (elements) => elements.flatMap((e) => [e, ...walk(e.children ?? [])]);
const observe = async (args) => {
  const result = await client.callTool({ name: "observe", arguments: args });
  if (result.isError) throw new Error(`observe failed: ${JSON.stringify(result.content)}`);
  const text = result.content.find((c) => c.type === "text");
  const image = result.content.find((c) => c.type === "image");
  return { meta: JSON.parse(text.text), image };
};

const { tools } = await client.listTools();
const home = await observe({});
const icon = walk(home.meta.elements).find((e) => e.label === "Settings");
if (!icon) throw new Error("no Settings icon in the tree");
const tapped = await client.callTool({ name: "tap", arguments: { element: icon.id } });
if (tapped.isError) throw new Error(`tap failed: ${JSON.stringify(tapped.content)}`);
const after = await observe({ format: "none" });
await client.callTool({ name: "press_key", arguments: { key: "home" } });
await transport.terminateSession();
await client.close();
console.log(
  JSON.stringify({
    tools: tools.length,
    image: Boolean(home.image && home.image.mimeType === "image/jpeg" && home.image.data.length > 100),
    width: home.meta.coordinates.width,
    tapped: after.meta.foreground,
  }),
);
