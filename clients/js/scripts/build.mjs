// Builds the SDK: tsc → dist/ (ESM + .d.ts, what npm publishes), and esbuild → one browser
// bundle with @microsoft/signalr inside, committed into the Python package so that the demo page
// needs no network and no build step at run time.
//   node clients/js/scripts/build.mjs          # build both
//   node clients/js/scripts/build.mjs --check  # exit 1 if the committed bundle is stale
import { execFileSync } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import * as esbuild from "esbuild";

const here = dirname(fileURLToPath(import.meta.url));
const pkg = resolve(here, "..");
const root = resolve(pkg, "../..");
const bundlePath = resolve(root, "src/realtime_dispatch/demo/static/messenger-client.js");
const check = process.argv.includes("--check");

if (!check) execFileSync(resolve(root, "node_modules/.bin/tsc"), ["-p", pkg], { stdio: "inherit" });

const built = await esbuild.build({
  entryPoints: [resolve(pkg, "src/index.ts")],
  bundle: true,
  format: "esm",
  platform: "browser",
  target: "es2022",
  minify: true,
  legalComments: "eof",
  write: false,
  banner: { js: "// @realtime-dispatch/client browser bundle: built by clients/js/scripts/build.mjs" },
});
const text = built.outputFiles[0].text;
if (check) {
  let committed = "";
  try { committed = readFileSync(bundlePath, "utf8"); } catch { /* missing */ }
  if (committed !== text) {
    console.error("the committed browser bundle is stale: run node clients/js/scripts/build.mjs");
    process.exit(1);
  }
} else {
  writeFileSync(bundlePath, text);
}
