// The package as an ES module: `import` and `require` of its name give the very same
// objects (one Client class, one set of errors), through the "exports" map.

import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { readFileSync } from 'node:fs';

import * as esm from 'wasmgear';

const require = createRequire(import.meta.url);
const cjs = require('wasmgear');

describe('ES module entry', () => {
  it('exports by name every export of the CommonJS entry, the same objects, and it as default', () => {
    const named = Object.keys(esm).filter((name) => name !== 'default').sort();
    assert.deepEqual(named, Object.keys(cjs).sort());
    for (const name of named) assert.equal(esm[name], cjs[name], name);
    assert.equal(esm.default, cjs);
    assert.ok(new esm.BadInputError('x') instanceof cjs.WasmgearError);
  });

  it('is reached through an "exports" map with types, import and require', () => {
    const pkg = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8'));
    const root = pkg.exports['.'];
    assert.deepEqual(Object.keys(root), ['import', 'require']);
    assert.equal(root.import.types, './index.d.mts');
    assert.equal(root.import.default, './index.mjs');
    assert.equal(root.require.types, './index.d.ts');
    assert.equal(root.require.default, './index.js');
    for (const file of ['index.mjs', 'index.d.mts', 'index.js', 'index.d.ts']) {
      assert.ok(pkg.files.includes(file), `package.json files lacks ${file}`);
    }
  });
});
