// Compiles src/*.sol with the pinned solc from npm (package.json) into build/NAME.json
// ({"abi", "bytecode", "solc"}); run by `make setup`. Imports resolve from node_modules.
"use strict";
const fs = require("fs");
const path = require("path");
const solc = require("solc");

const here = __dirname;
const src = path.join(here, "src");
const out = path.join(here, "build");
const sources = {};
for (const f of fs.readdirSync(src).filter((f) => f.endsWith(".sol")).sort()) {
  sources[f] = { content: fs.readFileSync(path.join(src, f), "utf8") };
}
const input = {
  language: "Solidity",
  sources,
  settings: {
    optimizer: { enabled: true, runs: 200 },
    evmVersion: "cancun",
    outputSelection: { "*": { "*": ["abi", "evm.bytecode.object", "evm.deployedBytecode.object"] } },
  },
};
function findImports(p) {
  for (const base of [path.join(here, "node_modules"), src]) {
    const full = path.join(base, p);
    if (fs.existsSync(full)) return { contents: fs.readFileSync(full, "utf8") };
  }
  return { error: `import not found: ${p} (run make setup: npm ci in contracts/)` };
}
const result = JSON.parse(solc.compile(JSON.stringify(input), { import: findImports }));
const errors = (result.errors || []).filter((e) => e.severity === "error");
for (const e of result.errors || []) console.error(e.formattedMessage);
if (errors.length) process.exit(1);
fs.mkdirSync(out, { recursive: true });
for (const file of Object.keys(sources)) {
  for (const [name, c] of Object.entries(result.contracts[file])) {
    const art = { contractName: name, solc: solc.version(), abi: c.abi, bytecode: "0x" + c.evm.bytecode.object };
    fs.writeFileSync(path.join(out, name + ".json"), JSON.stringify(art, null, 1) + "\n");
  }
}
console.log(`compiled ${Object.keys(sources).length} files with solc ${solc.version()} into ${path.relative(process.cwd(), out) || out}`);
