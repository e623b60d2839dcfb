// The peer of `mtctl data preprocess` in bench/preprocess_vs_tiktoken.sh: js-tiktoken's gpt2
// encoding (the npm package js-tiktoken@1.0.21, from $MT_ASSET_DIR/npm, offline) over every
// document of a JSON-lines file, in one Node process, one thread.
//
//   node bench/tiktoken_encode.js ASSET_DIR CORPUS.jsonl [KEY]
//
// Prints one JSON line: documents, tokens, and the seconds spent loading the ranks, reading and
// JSON-parsing the file, and encoding. Only `encode_seconds` is the tokenizer's own time.
'use strict';
const fs = require('fs');
const path = require('path');
const Module = require('module');

const [assetDir, corpus, key = 'text'] = process.argv.slice(2);
if (!assetDir || !corpus) {
  console.error('usage: node tiktoken_encode.js ASSET_DIR CORPUS.jsonl [KEY]');
  process.exit(2);
}
const npm = path.join(assetDir, 'npm');
const tiktokenDir = path.join(npm, 'js-tiktoken-1.0.21');
if (!fs.existsSync(tiktokenDir)) {
  console.error(`${tiktokenDir} is missing; run deploy/setup.sh (npm pack js-tiktoken@1.0.21)`);
  process.exit(3);
}

// js-tiktoken requires 'base64-js' (only to decode its rank table at construction). The asset
// directory holds unpacked tarballs, not a node_modules tree, so point the name at
// base64-js-1.5.1; without it, an equivalent built on Buffer (the encode path never calls it).
const base64Dir = path.join(npm, 'base64-js-1.5.1');
const haveBase64 = fs.existsSync(path.join(base64Dir, 'package.json'));
const resolve = Module._resolveFilename;
Module._resolveFilename = function (request, ...rest) {
  if (request === 'base64-js' && haveBase64) return resolve.call(this, base64Dir, ...rest);
  return resolve.call(this, request, ...rest);
};
if (!haveBase64) {
  console.error(`notice: ${base64Dir} missing; using a Buffer-based base64 decoder`);
  const shim = { toByteArray: (s) => new Uint8Array(Buffer.from(s, 'base64')) };
  const id = 'base64-js';
  Module._cache[id] = { id, filename: id, loaded: true, exports: shim };
  Module._resolveFilename = function (request, ...rest) {
    if (request === 'base64-js') return id;
    return resolve.call(this, request, ...rest);
  };
}

const seconds = (t0) => Number(process.hrtime.bigint() - t0) / 1e9;

let t = process.hrtime.bigint();
const { Tiktoken } = require(path.join(tiktokenDir, 'dist', 'lite.cjs'));
const gpt2 = require(path.join(tiktokenDir, 'dist', 'ranks', 'gpt2.cjs'));
const enc = new Tiktoken(gpt2);
const loadSeconds = seconds(t);

t = process.hrtime.bigint();
const texts = [];
let inputBytes = 0;
for (const line of fs.readFileSync(corpus, 'utf8').split('\n')) {
  if (line.trim() === '') continue;
  inputBytes += Buffer.byteLength(line) + 1;
  texts.push(JSON.parse(line)[key]);
}
const readSeconds = seconds(t);

// disallowedSpecial = []: "<|endoftext|>" inside text is ordinary text, as in mtctl (and
// Megatron's GPT2BPETokenizer).
t = process.hrtime.bigint();
let tokens = 0;
for (const text of texts) tokens += enc.encode(text, [], []).length;
const encodeSeconds = seconds(t);

console.log(JSON.stringify({
  documents: texts.length,
  tokens,
  input_bytes: inputBytes,
  load_seconds: loadSeconds,
  read_seconds: readSeconds,
  encode_seconds: encodeSeconds,
  node: process.version,
}));
