#!/usr/bin/env node
// The reference side of gpt2_bpe_parity_test.cc.
//
//   node encode_reference.js encode <Encoder.js> <input.jsonl> <output.txt>
//       encodes the "text" of each JSON line with gpt-3-encoder's encode(); writes one line
//       of space-separated ids per input line.
//   node encode_reference.js classes <output.txt>
//       writes one digit per code point 0..0x10FFFF: 1 = /\p{L}/u, 2 = /\p{N}/u, 3 = /\s/u,
//       0 = other (the classes of unicode_classes.h).
'use strict';
const fs = require('fs');
const [mode, ...args] = process.argv.slice(2);
if (mode === 'encode') {
  const [encoderJs, input, output] = args;
  const { encode } = require(encoderJs);
  const lines = fs.readFileSync(input, 'utf8').split('\n');
  if (lines.length && lines[lines.length - 1] === '') lines.pop();
  const out = fs.openSync(output, 'w');
  for (const line of lines) {
    fs.writeSync(out, encode(JSON.parse(line).text).join(' ') + '\n');
  }
  fs.closeSync(out);
} else if (mode === 'classes') {
  const buf = Buffer.alloc(0x110000);
  for (let cp = 0; cp < 0x110000; cp++) {
    const s = String.fromCodePoint(cp);
    buf[cp] = /\p{L}/u.test(s) ? 49 : /\p{N}/u.test(s) ? 50 : /\s/u.test(s) ? 51 : 48;
  }
  fs.writeFileSync(args[0], buf);
} else {
  console.error('usage: encode_reference.js encode <Encoder.js> <in.jsonl> <out.txt> | classes <out>');
  process.exit(2);
}
