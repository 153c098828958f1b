// The demo page's browser bundle: esbuild → one ES module of the TypeScript SDK (clients/js/src)
// with @microsoft/signalr inside, committed into the Python package so that the demo page needs
// no network and no build step at run time. A step of its own (`make js`), apart from the SDK's
// build (`npm run build` in clients/js, tsc → dist/), with the repository root's node_modules
// (`npm ci` at the root): esbuild and the @microsoft/signalr the bundle carries.
//   node scripts/build_demo_bundle.mjs          # write the bundle
//   node scripts/build_demo_bundle.mjs --check  # exit 1 if the committed bundle is stale
import { readFileSync, writeFileSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import * as esbuild from "esbuild";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const bundlePath = resolve(root, "src/realtime_dispatch/messenger/demo/static/messenger-client.js");
const check = process.argv.includes("--check");

const built = await esbuild.build({
  entryPoints: [resolve(root, "clients/js/src/index.ts")],
  bundle: true,
  format: "esm",
  platform: "browser",
  target: "es2022",
  minify: true,
  legalComments: "eof",
  write: false,
  // the root's copy, even when clients/js has a node_modules of its own (its `npm ci`)
  alias: { "@microsoft/signalr": resolve(root, "node_modules/@microsoft/signalr") },
  banner: { js: "// @realtime-dispatch/client browser bundle: built by scripts/build_demo_bundle.mjs" },
});
const text = built.outputFiles[0].text;
if (check) {
  let committed = "";
  try { committed = readFileSync(bundlePath, "utf8"); } catch { /* missing */ }
  if (committed !== text) {
    console.error("the committed browser bundle is stale: run node scripts/build_demo_bundle.mjs");
    process.exit(1);
  }
} else {
  writeFileSync(bundlePath, text);
}
