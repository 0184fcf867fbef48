'use strict';

/**
 * Encrypted job data, as the Rust client has it (crates/proto/src/crypto.rs, the key ring
 * and the envelope; crates/client/src/opening.rs, what a client seals and opens), byte for
 * byte: PROTOCOL.md, "Encrypted job data".
 *
 * A key file holds one key a line, `ID BASE64(32 bytes)` (`#` starts a comment): the first
 * key seals new data, every key opens. An envelope is `MAGIC | id length (1 byte) | id |
 * nonce (12 bytes) | ciphertext | tag (16 bytes)`, AES-256-GCM with the associated data
 * `wasmgear-v1|FUNCTION:NUMBER|FIELD`: bound to its job and field, a ciphertext moved to
 * another job or field does not open. In a text field (an error message, a log line) it is
 * written TEXT_PREFIX and its base64.
 */

const crypto = require('node:crypto');
const fs = require('node:fs');

const { BadInputError } = require('./errors');

/** What every envelope starts with: a zero byte (no text starts so) and a version. */
const MAGIC = Buffer.from('\0wgenc1', 'latin1');
/** What an envelope in a text field starts with, before its base64. */
const TEXT_PREFIX = 'wgenc1:';
const NONCE_LEN = 12;
const TAG_LEN = 16;
/** The longest key id, bytes. */
const MAX_KEY_ID_LEN = 32;
/** The parts of a job an envelope may hold (part of what it is bound to). */
const FIELDS = new Set(['input', 'output', 'error', 'log', 'checkpoint']);
/**
 * The most bytes an envelope holds before its ciphertext (magic, key id, nonce): reading that
 * much of stored data tells whether it is sealed, and how large it is opened.
 */
const MAX_HEADER = MAGIC.length + 1 + MAX_KEY_ID_LEN + NONCE_LEN;
/** What a log holds in place of the front of a sealed attempt cut by the log's size limit. */
const CUT = "[the start of this attempt's encrypted log was cut]\n";

/** Why encrypted data does not open, or a key file does not read: bad input, as in Rust. */
const refused = (message) => new BadInputError(message);

/** `data` as bytes (a string as UTF-8). */
function bytes(data) {
  return Buffer.isBuffer(data) ? data : Buffer.from(data);
}

/**
 * `text` decoded as standard base64, strictly (padded, canonical, nothing else), as the
 * Rust side decodes it; null when it is not.
 */
function strictBase64(text) {
  if (!/^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/.test(text)) return null;
  const decoded = Buffer.from(text, 'base64');
  return decoded.toString('base64') === text ? decoded : null;
}

/** Why `id` is no key id, or null. */
function badId(id) {
  if (/^[A-Za-z0-9_.-]{1,32}$/.test(id)) return null;
  return `key id ${JSON.stringify(id)} must be 1 to ${MAX_KEY_ID_LEN} of [A-Za-z0-9_.-]`;
}

function checkField(field) {
  if (!FIELDS.has(field)) throw new TypeError(`no such field of a job: ${field}`);
}

/** What an envelope is bound to. */
function associated(job, field) {
  return Buffer.from(`wasmgear-v1|${job}|${field}`, 'utf8');
}

/**
 * The parts of envelope `data` (`{keyId, nonce, body}`), or null when it is not one; a
 * cut-short or garbled one is refused naming `job` and `field`.
 */
function readEnvelope(data, job, field) {
  if (data.length < MAGIC.length || !data.subarray(0, MAGIC.length).equals(MAGIC)) return null;
  const malformed = () => refused(`encrypted data of ${job} (${field}) is cut short or garbled`);
  const rest = data.subarray(MAGIC.length);
  if (rest.length < 1) throw malformed();
  const idLen = rest[0];
  if (rest.length - 1 < idLen + NONCE_LEN + TAG_LEN) throw malformed();
  let keyId;
  try {
    keyId = new TextDecoder('utf-8', { fatal: true }).decode(rest.subarray(1, 1 + idLen));
  } catch {
    throw malformed();
  }
  const nonce = rest.subarray(1 + idLen, 1 + idLen + NONCE_LEN);
  return { keyId, nonce, body: rest.subarray(1 + idLen + NONCE_LEN) };
}

/** The keys of a key file: the first seals, every one opens. */
class KeyRing {
  /** `[id, key (32 bytes)]` pairs, in the file's order. */
  #keys;

  constructor(keys) {
    this.#keys = keys;
  }

  /** Reads a key file's text (`path` names it in errors). */
  static parse(path, text) {
    const bad = (line, reason) => refused(`the encryption key file ${path}: line ${line}: ${reason}`);
    const keys = [];
    // As Rust's `str::lines`: split at \n, a \r before it dropped (no last empty line).
    const lines = String(text).split('\n');
    if (lines.at(-1) === '') lines.pop();
    lines.forEach((raw, n) => {
      const line = raw.replace(/\r$/, '').split('#')[0].trim();
      if (line === '') return;
      const words = line.split(/\s+/);
      if (words.length !== 2) throw bad(n + 1, 'expected `ID BASE64KEY`');
      const [id, key] = words;
      const why = badId(id);
      if (why) throw bad(n + 1, why);
      if (keys.some(([other]) => other === id)) throw bad(n + 1, `key id ${JSON.stringify(id)} is used twice`);
      const decoded = strictBase64(key);
      if (decoded === null) throw bad(n + 1, 'the key is not base64');
      if (decoded.length !== 32) throw bad(n + 1, `the key is ${decoded.length} bytes, not 32`);
      keys.push([id, decoded]);
    });
    if (keys.length === 0) {
      throw refused(`the encryption key file ${path}: it holds no key (add one with \`wasmgear keys new FILE ID\`)`);
    }
    return new KeyRing(keys);
  }

  /** Reads the key file at `path`. */
  static fromFile(path) {
    let text;
    try {
      text = fs.readFileSync(path, 'utf8');
    } catch (error) {
      throw refused(`cannot read the encryption key file ${path}: ${error.message}`);
    }
    return KeyRing.parse(path, text);
  }

  /** The id of the key that seals new data. */
  get current() {
    return this.#keys[0][0];
  }

  /** `plaintext` sealed as `field` of job `job` (`FUNCTION:NUMBER`) with the current key. */
  seal(job, field, plaintext) {
    return this.sealWithNonce(job, field, plaintext, crypto.randomBytes(NONCE_LEN));
  }

  /** `seal` with a given nonce: for the pinned vector only (a nonce must never repeat). */
  sealWithNonce(job, field, plaintext, nonce) {
    checkField(field);
    const [id, key] = this.#keys[0];
    const cipher = crypto.createCipheriv('aes-256-gcm', key, nonce, { authTagLength: TAG_LEN });
    cipher.setAAD(associated(job, field));
    const body = Buffer.concat([cipher.update(bytes(plaintext)), cipher.final(), cipher.getAuthTag()]);
    return Buffer.concat([MAGIC, Buffer.from([id.length]), Buffer.from(id, 'latin1'), nonce, body]);
  }

  /** `data` opened as `field` of job `job` if it is an envelope, else `data` as it is. */
  open(job, field, data) {
    checkField(field);
    const parts = readEnvelope(bytes(data), job, field);
    if (parts === null) return data;
    const found = this.#keys.find(([id]) => id === parts.keyId);
    if (!found) {
      throw refused(
        `encrypted with key ${JSON.stringify(parts.keyId)}, which is not in this key file (add it to read the data)`,
      );
    }
    const decipher = crypto.createDecipheriv('aes-256-gcm', found[1], parts.nonce, { authTagLength: TAG_LEN });
    decipher.setAAD(associated(job, field));
    decipher.setAuthTag(parts.body.subarray(parts.body.length - TAG_LEN));
    try {
      return Buffer.concat([decipher.update(parts.body.subarray(0, parts.body.length - TAG_LEN)), decipher.final()]);
    } catch {
      throw refused(
        `encrypted data of ${job} (${field}) does not open with key ${JSON.stringify(parts.keyId)}: ` +
          'it was changed, or belongs to another job',
      );
    }
  }

  /** `text` sealed for a text field: TEXT_PREFIX and the envelope's base64. */
  sealText(job, field, text) {
    return TEXT_PREFIX + this.seal(job, field, Buffer.from(text, 'utf8')).toString('base64');
  }

  /** A text field opened if it is sealed, else as it is. */
  openText(job, field, text) {
    if (!text.startsWith(TEXT_PREFIX)) return text;
    const sealed = strictBase64(text.slice(TEXT_PREFIX.length).trim());
    if (sealed === null) throw refused(`encrypted data of ${job} (${field}) is cut short or garbled`);
    return this.open(job, field, sealed).toString('utf8');
  }
}

/** Whether `data` (bytes or text) is an envelope. */
function isSealed(data) {
  const b = bytes(data);
  return b.subarray(0, MAGIC.length).equals(MAGIC) || b.subarray(0, TEXT_PREFIX.length).toString('latin1') === TEXT_PREFIX;
}

/** The id of the key `data` (bytes or text) was sealed with, if it is an envelope; else null. */
function sealedWith(data) {
  let b = bytes(data);
  if (b.subarray(0, TEXT_PREFIX.length).toString('latin1') === TEXT_PREFIX) {
    b = strictBase64(b.subarray(TEXT_PREFIX.length).toString('latin1'));
    if (b === null) return null;
  }
  try {
    return readEnvelope(b, '', 'input')?.keyId ?? null;
  } catch {
    return null;
  }
}

/**
 * The keys and `encryptAll` of a client, from the connect options `encryptionKeyFile` and
 * `encryptAll`, else the environment (WASMGEAR_ENCRYPTION_KEY_FILE, WASMGEAR_ENCRYPT_ALL),
 * as the Rust CLI takes them; `encryptionKeyFile: null` reads no key file. The file is read
 * here, before anything connects.
 */
function encryptionOf(opts, env = process.env) {
  let path = opts.encryptionKeyFile;
  if (path === undefined) path = env.WASMGEAR_ENCRYPTION_KEY_FILE || null;
  else if (path !== null && (typeof path !== 'string' || path === '')) {
    throw new BadInputError('invalid connect option encryptionKeyFile: give the path of a key file, or null');
  }
  let all = opts.encryptAll;
  if (all === undefined) {
    const word = String(env.WASMGEAR_ENCRYPT_ALL ?? '').trim().toLowerCase();
    if (['1', 'true', 'yes', 'on', 'y', 't'].includes(word)) all = true;
    else if (['', '0', 'false', 'no', 'off', 'n', 'f'].includes(word)) all = false;
    else throw new BadInputError(`invalid WASMGEAR_ENCRYPT_ALL ${JSON.stringify(env.WASMGEAR_ENCRYPT_ALL)}: give 1 or 0`);
  } else if (typeof all !== 'boolean') {
    throw new BadInputError(`invalid connect option encryptAll: ${JSON.stringify(all)} is not true or false`);
  }
  if (all && path === null) {
    throw new BadInputError(
      'encryptAll needs a key file (connect option encryptionKeyFile, or WASMGEAR_ENCRYPTION_KEY_FILE)',
    );
  }
  return { keys: path === null ? null : KeyRing.fromFile(path), encryptAll: all };
}

/** The value of option `name` among `named` (`[name, value, ...]` pairs), or null. */
function optionOf(named, name) {
  for (let i = 0; i + 1 < named.length; i += 2) if (named[i] === name) return String(named[i + 1]);
  return null;
}

/**
 * Jobs of function `fn` (`{named, input}` each, as an `enqueue` call takes them) with their
 * inputs sealed by `keys`, each bound to its number: the one it is placed at (a flow's or a
 * batch's `number`), else one reserved here (`reserve(n)` resolves the first of n) and
 * added as its `number` option.
 */
async function sealJobs(keys, fn, jobs, reserve) {
  const unnumbered = jobs.filter((job) => optionOf(job.named, 'number') === null).length;
  let next = unnumbered > 0 ? BigInt(await reserve(unnumbered)) : 0n;
  return jobs.map((job) => {
    let number = optionOf(job.named, 'number');
    let { named } = job;
    if (number === null) {
      number = String(next);
      next += 1n;
      named = [...named, 'number', number];
    }
    return { ...job, named, input: keys.seal(`${fn}:${number}`, 'input', job.input) };
  });
}

/**
 * How many bytes of binary data starting with `head` are the envelope's own (magic, key id,
 * nonce, tag); null when it is not sealed: the data opened is that much smaller.
 */
function overhead(head) {
  const b = bytes(head);
  if (b.length <= MAGIC.length || !b.subarray(0, MAGIC.length).equals(MAGIC)) return null;
  return MAGIC.length + 1 + b[MAGIC.length] + NONCE_LEN + TAG_LEN;
}

/**
 * What a reader without keys is told of sealed `data` (the Rust client's
 * `CryptoError::NoKeys`), naming the key that sealed it (`?` when that does not read).
 */
function noKeysHere(data) {
  return `encrypted (key ${JSON.stringify(sealedWith(data) ?? '?')}); no key here (give the key file: WASMGEAR_ENCRYPTION_KEY_FILE)`;
}

/**
 * A text field as a reader without keys sees it: a sealed one says so, `<encrypted (key
 * "K"); no key here ...>`; any other as it is.
 */
function saidSealed(text) {
  return text.startsWith(TEXT_PREFIX) ? `<${noKeysHere(text)}>` : text;
}

/**
 * Job `job` (as lib/job.js builds it) with its sealed parts opened by `keys`: its output,
 * its error message and its history's messages, in the Job and in its `record` (a copy).
 * Without keys (null), its sealed messages say they are sealed (`saidSealed`) and a sealed
 * output is left as it is.
 */
function openJob(keys, job) {
  const id = job.id;
  const opening = keys === null ? saidSealed : (message) => keys.openText(id, 'error', message);
  // An object with a text `message`, that message opened (any other as it is: no field added).
  const withText = (entry) =>
    entry && typeof entry === 'object' && typeof entry.message === 'string'
      ? { ...entry, message: opening(entry.message) }
      : entry;
  const opened = { ...job };
  if (job.output && keys !== null) opened.output = keys.open(id, 'output', job.output);
  if (job.error) opened.error = withText(job.error);
  opened.history = job.history.map(withText);
  const record = { ...job.record };
  if (record.error) record.error = withText(record.error);
  if (Array.isArray(record.history)) record.history = record.history.map(withText);
  opened.record = record;
  return opened;
}

/** Bytes of job `id` sealed as `field`, opened (as they are when not sealed). */
function openBytes(keys, id, field, data) {
  return isSealed(data) ? keys.open(id, field, data) : data;
}

/**
 * Job `id`'s log with each sealed attempt (a line of its own) opened; the front of an
 * attempt cut by the log's size limit says so. Without keys (null), each sealed line says it
 * is sealed (`saidSealed`), its line break kept.
 */
function openLog(keys, id, log) {
  if (!log.includes(TEXT_PREFIX)) return log;
  let opened = '';
  for (const line of log.match(/[^\n]*\n|[^\n]+$/g) || []) {
    const text = line.replace(/\n$/, '');
    if (keys === null) {
      opened += text.startsWith(TEXT_PREFIX) ? `${saidSealed(text)}\n` : line;
    } else if (text.startsWith(TEXT_PREFIX)) {
      opened += keys.openText(id, 'log', text);
      if (!opened.endsWith('\n')) opened += '\n';
    } else if (opened === '' && !text.startsWith('--- attempt ')) {
      opened += CUT;
    } else {
      opened += line;
    }
  }
  return opened;
}

module.exports = {
  MAGIC,
  MAX_HEADER,
  TEXT_PREFIX,
  KeyRing,
  isSealed,
  sealedWith,
  overhead,
  noKeysHere,
  saidSealed,
  encryptionOf,
  sealJobs,
  openJob,
  openBytes,
  openLog,
};
