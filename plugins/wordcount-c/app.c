/*
 * `wordcount-c`: counts the words, lines and characters of a text (the example job, the same
 * in every language).
 *
 * Input is JSON `{"text": "..."}`. The text is processed in chunks of 1000 characters
 * (Unicode code points): before each the job checks for cancellation, after each it reports
 * progress `(i, n, "chunk i/n")`. The output is compact JSON
 * `{"words":W,"lines":L,"chars":C,"top":[["word",count],...]}`: words are maximal runs of
 * characters other than space, \t, \n, \r, \x0b and \x0c; lines counts '\n'; chars counts
 * code points; top holds the 3 most frequent words (ASCII-lowercased), by count descending,
 * then word ascending. The output is byte for byte that of wordcount-rust, -python and -js.
 * Input that is not a JSON object with a string "text" fails the job for good (as does a
 * "text" holding a lone surrogate, which is not Unicode); `"fail_retry": true` asks for a
 * retry instead, and `"chunk_delay_ms": N` waits N ms before each chunk (a long job to cancel
 * in tests).
 *
 * Build: ./build.sh [OUT_DIR] (clang-19 for wasm32-wasi, then `wasmgear componentize`).
 */
#include <time.h>

#include "job.h"
#include "wasmgear.h"

#include <inttypes.h>

/* Characters per chunk (one progress report each). */
#define CHUNK 1000
/* How many of the most frequent words the output lists. */
#define TOP 3

/* ---- a small strict JSON reader (RFC 8259, what Python's json.loads accepts) ----------- */

typedef struct json {
    const uint8_t *s; /* the input, valid UTF-8 */
    size_t len;
    size_t pos;
    const char *error; /* what is wrong, at byte error_pos; NULL while all is well */
    size_t error_pos;
} json;

/* The kinds of JSON values, named as the error messages name them. */
typedef enum { J_INVALID, J_OBJECT, J_ARRAY, J_STRING, J_BOOLEAN, J_NUMBER, J_NULL } json_kind;

static const char *kind_name(json_kind kind) {
    switch (kind) {
    case J_OBJECT: return "an object";
    case J_ARRAY: return "an array";
    case J_STRING: return "a string";
    case J_BOOLEAN: return "a boolean";
    case J_NUMBER: return "a number";
    case J_NULL: return "null";
    default: return "something else";
    }
}

static json_kind kind_at(const json *p) {
    if (p->pos >= p->len) return J_INVALID;
    switch (p->s[p->pos]) {
    case '{': return J_OBJECT;
    case '[': return J_ARRAY;
    case '"': return J_STRING;
    case 't': case 'f': return J_BOOLEAN;
    case 'n': return J_NULL;
    case '-': case '0': case '1': case '2': case '3': case '4':
    case '5': case '6': case '7': case '8': case '9': return J_NUMBER;
    default: return J_INVALID;
    }
}

static bool fail_at(json *p, const char *what, size_t pos) {
    p->error = what;
    p->error_pos = pos;
    return false;
}

static void skip_ws(json *p) {
    while (p->pos < p->len) {
        uint8_t c = p->s[p->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        p->pos++;
    }
}

static bool at(const json *p, uint8_t c) {
    return p->pos < p->len && p->s[p->pos] == c;
}

static int hex_digit(uint8_t c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* The 4 hex digits at s[0..4) as a number, or -1. */
static long hex4(const uint8_t *s) {
    long v = 0;
    for (int i = 0; i < 4; i++) {
        int d = hex_digit(s[i]);
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

/* Checks the string at p->pos (at its opening quote) and moves past it. */
static bool scan_string(json *p) {
    size_t begin = p->pos++;
    for (;;) {
        if (p->pos >= p->len) return fail_at(p, "Unterminated string starting at", begin);
        uint8_t c = p->s[p->pos];
        if (c == '"') {
            p->pos++;
            return true;
        }
        if (c < 0x20) return fail_at(p, "Invalid control character at", p->pos);
        if (c != '\\') {
            p->pos++;
            continue;
        }
        if (p->pos + 1 >= p->len) return fail_at(p, "Unterminated string starting at", begin);
        switch (p->s[p->pos + 1]) {
        case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
            p->pos += 2;
            break;
        case 'u':
            if (p->len - p->pos < 6 || hex4(p->s + p->pos + 2) < 0)
                return fail_at(p, "Invalid \\uXXXX escape", p->pos + 1);
            p->pos += 6;
            break;
        default:
            return fail_at(p, "Invalid \\escape", p->pos);
        }
    }
}

static size_t put_utf8(uint8_t *out, unsigned long cp) {
    if (cp < 0x80) {
        out[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (uint8_t)(0xC0 | (cp >> 6));
        out[1] = (uint8_t)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) { /* a lone surrogate comes out as WTF-8 (ED A0..BF xx) */
        out[0] = (uint8_t)(0xE0 | (cp >> 12));
        out[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (uint8_t)(0xF0 | (cp >> 18));
    out[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

/* A decoded string. `lone` is the first lone surrogate of the string (0: none), which
 * `bytes` holds as WTF-8 and which makes the string not UTF-8. */
typedef struct jstr {
    uint8_t *bytes; /* malloc'd */
    size_t len;
    unsigned long lone;
} jstr;

/* Reads the string at p->pos (at its opening quote) into *out and moves past it. */
static bool read_string(json *p, jstr *out) {
    size_t begin = p->pos;
    if (!scan_string(p)) return false;
    /* Escapes only shrink: the decoded string fits in the quoted one. */
    size_t end = p->pos - 1;
    uint8_t *b = malloc(end - begin);
    if (!b) abort();
    size_t n = 0;
    unsigned long lone = 0;
    for (size_t i = begin + 1; i < end;) {
        uint8_t c = p->s[i];
        if (c != '\\') {
            b[n++] = c;
            i++;
            continue;
        }
        uint8_t e = p->s[i + 1];
        i += 2;
        switch (e) {
        case 'b': b[n++] = '\b'; break;
        case 'f': b[n++] = '\f'; break;
        case 'n': b[n++] = '\n'; break;
        case 'r': b[n++] = '\r'; break;
        case 't': b[n++] = '\t'; break;
        case 'u': {
            unsigned long cp = (unsigned long)hex4(p->s + i);
            i += 4;
            if (cp >= 0xD800 && cp <= 0xDBFF && end - i >= 6 && p->s[i] == '\\' &&
                p->s[i + 1] == 'u') {
                long low = hex4(p->s + i + 2);
                if (low >= 0xDC00 && low <= 0xDFFF) {
                    cp = 0x10000 + ((cp - 0xD800) << 10) + ((unsigned long)low - 0xDC00);
                    i += 6;
                }
            }
            if (cp >= 0xD800 && cp <= 0xDFFF && lone == 0) lone = cp;
            n += put_utf8(b + n, cp);
            break;
        }
        default: b[n++] = e; break; /* '"', '\\', '/' */
        }
    }
    out->bytes = b;
    out->len = n;
    out->lone = lone;
    return true;
}

static bool scan_literal(json *p, const char *word) {
    size_t n = strlen(word);
    if (p->len - p->pos < n || memcmp(p->s + p->pos, word, n) != 0)
        return fail_at(p, "Expecting value", p->pos);
    p->pos += n;
    return true;
}

static bool is_digit(const json *p, size_t i) {
    return i < p->len && p->s[i] >= '0' && p->s[i] <= '9';
}

/* -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)? : what does not match stays unread. */
static bool scan_number(json *p) {
    size_t i = p->pos;
    if (i < p->len && p->s[i] == '-') i++;
    if (i < p->len && p->s[i] == '0') {
        i++;
    } else if (is_digit(p, i)) {
        while (is_digit(p, i)) i++;
    } else {
        return fail_at(p, "Expecting value", p->pos);
    }
    if (i < p->len && p->s[i] == '.' && is_digit(p, i + 1)) {
        i++;
        while (is_digit(p, i)) i++;
    }
    if (i < p->len && (p->s[i] == 'e' || p->s[i] == 'E')) {
        size_t j = i + 1;
        if (j < p->len && (p->s[j] == '+' || p->s[j] == '-')) j++;
        if (is_digit(p, j)) {
            while (is_digit(p, j)) j++;
            i = j;
        }
    }
    p->pos = i;
    return true;
}

/* At a member's key: reads `"key" :` and the whitespace after it. */
static bool scan_key(json *p) {
    if (!at(p, '"'))
        return fail_at(p, "Expecting property name enclosed in double quotes", p->pos);
    if (!scan_string(p)) return false;
    skip_ws(p);
    if (!at(p, ':')) return fail_at(p, "Expecting ':' delimiter", p->pos);
    p->pos++;
    skip_ws(p);
    return true;
}

/* Checks the value at p->pos and moves past it. Iterative, so nesting depth is bounded by
 * memory only. */
static bool skip_value(json *p) {
    uint8_t *stack = NULL; /* the open containers, '{' or '[' */
    size_t depth = 0, cap = 0;
    bool ok = false;
    for (;;) {
        /* a value starts here */
        switch (kind_at(p)) {
        case J_OBJECT:
        case J_ARRAY: {
            uint8_t open = p->s[p->pos++];
            skip_ws(p);
            if (at(p, open == '{' ? '}' : ']')) {
                p->pos++;
                break; /* empty: the value is done */
            }
            if (depth == cap) {
                cap = cap ? cap * 2 : 32;
                uint8_t *grown = realloc(stack, cap);
                if (!grown) abort();
                stack = grown;
            }
            stack[depth++] = open;
            if (open == '{' && !scan_key(p)) goto out;
            continue; /* the first element or member value */
        }
        case J_STRING:
            if (!scan_string(p)) goto out;
            break;
        case J_BOOLEAN:
            if (!scan_literal(p, p->s[p->pos] == 't' ? "true" : "false")) goto out;
            break;
        case J_NULL:
            if (!scan_literal(p, "null")) goto out;
            break;
        case J_NUMBER:
            if (!scan_number(p)) goto out;
            break;
        default:
            fail_at(p, "Expecting value", p->pos);
            goto out;
        }
        /* a value is done: close the containers it completes */
        for (;;) {
            if (depth == 0) {
                ok = true;
                goto out;
            }
            uint8_t open = stack[depth - 1];
            skip_ws(p);
            if (at(p, ',')) {
                p->pos++;
                skip_ws(p);
                if (open == '{' && !scan_key(p)) goto out;
                break; /* the next element or member value */
            }
            if (at(p, open == '{' ? '}' : ']')) {
                p->pos++;
                depth--;
                continue;
            }
            fail_at(p, "Expecting ',' delimiter", p->pos);
            goto out;
        }
    }
out:
    free(stack);
    return ok;
}

/* What the job's input asks for. */
typedef struct request {
    json_kind kind;      /* of the whole input */
    bool fail_retry;     /* "fail_retry": true */
    unsigned delay_ms;   /* "chunk_delay_ms": N, a whole number of milliseconds (else 0) */
    json_kind text_kind; /* of "text"; J_INVALID when it is missing */
    jstr text;           /* "text" when it is a string */
} request;

static bool key_is(const jstr *key, const char *name) {
    return key->len == strlen(name) && memcmp(key->bytes, name, key->len) == 0;
}

/* Reads the whole input; as in Python's json.loads, a later duplicate key wins. */
static bool read_request(json *p, request *r) {
    memset(r, 0, sizeof *r);
    skip_ws(p);
    r->kind = kind_at(p);
    if (r->kind != J_OBJECT) {
        if (!skip_value(p)) return false;
    } else {
        p->pos++;
        skip_ws(p);
        if (at(p, '}')) {
            p->pos++;
        } else {
            for (;;) {
                if (!at(p, '"'))
                    return fail_at(p, "Expecting property name enclosed in double quotes", p->pos);
                jstr key;
                if (!read_string(p, &key)) return false;
                skip_ws(p);
                if (!at(p, ':')) {
                    free(key.bytes);
                    return fail_at(p, "Expecting ':' delimiter", p->pos);
                }
                p->pos++;
                skip_ws(p);
                size_t start = p->pos;
                json_kind kind = kind_at(p);
                bool ok;
                if (key_is(&key, "text")) {
                    r->text_kind = kind;
                    free(r->text.bytes);
                    r->text.bytes = NULL;
                    if (kind == J_STRING) ok = read_string(p, &r->text);
                    else ok = skip_value(p);
                } else {
                    ok = skip_value(p);
                    if (ok && key_is(&key, "fail_retry"))
                        r->fail_retry = p->pos - start == 4 && memcmp(p->s + start, "true", 4) == 0;
                    if (ok && key_is(&key, "chunk_delay_ms")) {
                        unsigned ms = 0;
                        size_t k = start;
                        while (k < p->pos && p->s[k] >= '0' && p->s[k] <= '9' && ms < 3600000)
                            ms = ms * 10 + (unsigned)(p->s[k++] - '0');
                        r->delay_ms = k == p->pos ? ms : 0;
                    }
                }
                free(key.bytes);
                if (!ok) return false;
                skip_ws(p);
                if (at(p, ',')) {
                    p->pos++;
                    skip_ws(p);
                    continue;
                }
                if (at(p, '}')) {
                    p->pos++;
                    break;
                }
                return fail_at(p, "Expecting ',' delimiter", p->pos);
            }
        }
    }
    skip_ws(p);
    if (p->pos != p->len) return fail_at(p, "Extra data", p->pos);
    return true;
}

/* ---- counting ----------------------------------------------------------------------- */

static bool is_space(uint8_t c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == 0x0b || c == 0x0c;
}

/* How often each word occurs: an open-addressing hash table of slices of the text. */
typedef struct entry {
    size_t off, len; /* the word, text[off..off+len) */
    uint64_t count;  /* 0: a free slot */
    uint32_t hash;
} entry;

typedef struct table {
    entry *slots;
    size_t cap; /* a power of two */
    size_t used;
} table;

static uint32_t hash_bytes(const uint8_t *s, size_t len) {
    uint32_t h = 2166136261u; /* FNV-1a */
    for (size_t i = 0; i < len; i++) h = (h ^ s[i]) * 16777619u;
    return h;
}

static void table_grow(table *t) {
    size_t cap = t->cap ? t->cap * 2 : 1024;
    entry *slots = calloc(cap, sizeof *slots);
    if (!slots) abort();
    for (size_t i = 0; i < t->cap; i++) {
        entry *e = &t->slots[i];
        if (!e->count) continue;
        size_t j = e->hash & (cap - 1);
        while (slots[j].count) j = (j + 1) & (cap - 1);
        slots[j] = *e;
    }
    free(t->slots);
    t->slots = slots;
    t->cap = cap;
}

static void table_add(table *t, const uint8_t *text, size_t off, size_t len) {
    if ((t->used + 1) * 2 > t->cap) table_grow(t);
    uint32_t h = hash_bytes(text + off, len);
    size_t j = h & (t->cap - 1);
    for (;;) {
        entry *e = &t->slots[j];
        if (!e->count) {
            *e = (entry){off, len, 1, h};
            t->used++;
            return;
        }
        if (e->hash == h && e->len == len && memcmp(text + e->off, text + off, len) == 0) {
            e->count++;
            return;
        }
        j = (j + 1) & (t->cap - 1);
    }
}

/* Whether `a` goes before `b` in the top list: more frequent first, then by the word's
 * bytes (UTF-8 byte order is code point order), a prefix first. */
static bool before(const uint8_t *text, const entry *a, const entry *b) {
    if (a->count != b->count) return a->count > b->count;
    size_t n = a->len < b->len ? a->len : b->len;
    int c = memcmp(text + a->off, text + b->off, n);
    return c != 0 ? c < 0 : a->len < b->len;
}

/* Appends `word` as a JSON string, escaped as JSON.stringify does. */
static void put_json_string(wasmgear_buf *out, const uint8_t *word, size_t len) {
    wasmgear_buf_putc(out, '"');
    size_t run = 0; /* bytes that need no escape, not yet appended */
    for (size_t i = 0; i < len; i++) {
        uint8_t c = word[i];
        if (c >= 0x20 && c != '"' && c != '\\') {
            run++;
            continue;
        }
        wasmgear_buf_append(out, word + i - run, run);
        run = 0;
        switch (c) {
        case '"': wasmgear_buf_puts(out, "\\\""); break;
        case '\\': wasmgear_buf_puts(out, "\\\\"); break;
        case '\b': wasmgear_buf_puts(out, "\\b"); break;
        case '\f': wasmgear_buf_puts(out, "\\f"); break;
        case '\n': wasmgear_buf_puts(out, "\\n"); break;
        case '\r': wasmgear_buf_puts(out, "\\r"); break;
        case '\t': wasmgear_buf_puts(out, "\\t"); break;
        default: wasmgear_buf_printf(out, "\\u%04x", c); break;
        }
    }
    wasmgear_buf_append(out, word + len - run, run);
    wasmgear_buf_putc(out, '"');
}

/* Counts text[0..len) (valid UTF-8; lowercased in place) chunk by chunk, checking for
 * cancellation before each chunk and reporting progress after each. */
static wasmgear_result count(uint8_t *text, size_t len, size_t chars, unsigned delay_ms) {
    size_t total = (chars + CHUNK - 1) / CHUNK;
    uint64_t words = 0, lines = 0;
    table freq = {NULL, 0, 0};
    const size_t none = SIZE_MAX;
    size_t word = none; /* where the current word started */
    size_t pos = 0;
    for (size_t i = 0; i < total; i++) {
        if (delay_ms > 0) {
            struct timespec pause = {delay_ms / 1000, (long)(delay_ms % 1000) * 1000000L};
            nanosleep(&pause, NULL);
        }
        if (wasmgear_cancelled()) {
            free(freq.slots);
            return wasmgear_fail("cancelled after %zu of %zu chunks", i, total);
        }
        size_t n = 0; /* characters of this chunk so far */
        for (; pos < len; pos++) {
            uint8_t c = text[pos];
            if ((c & 0xC0) != 0x80 && n++ == CHUNK) break; /* the next chunk's first */
            if (c == '\n') lines++;
            if (is_space(c)) {
                if (word != none) {
                    words++;
                    table_add(&freq, text, word, pos - word);
                    word = none;
                }
            } else {
                if (word == none) word = pos;
                if (c >= 'A' && c <= 'Z') text[pos] = (uint8_t)(c + ('a' - 'A'));
            }
        }
        wasmgear_progressf(i + 1, total, "chunk %zu/%zu", i + 1, total);
    }
    if (word != none) {
        words++;
        table_add(&freq, text, word, len - word);
    }

    const entry *top[TOP];
    size_t ntop = 0;
    for (size_t i = 0; i < freq.cap; i++) {
        const entry *e = &freq.slots[i];
        if (!e->count) continue;
        size_t j = ntop < TOP ? ntop++ : TOP;
        while (j > 0 && before(text, e, top[j - 1])) {
            if (j < TOP) top[j] = top[j - 1];
            j--;
        }
        if (j < TOP) top[j] = e;
    }

    wasmgear_buf out = {0};
    wasmgear_buf_printf(&out, "{\"words\":%" PRIu64 ",\"lines\":%" PRIu64 ",\"chars\":%zu,\"top\":[",
                        words, lines, chars);
    for (size_t i = 0; i < ntop; i++) {
        wasmgear_buf_puts(&out, i ? ",[" : "[");
        put_json_string(&out, text + top[i]->off, top[i]->len);
        wasmgear_buf_printf(&out, ",%" PRIu64 "]", top[i]->count);
    }
    wasmgear_buf_puts(&out, "]}");
    free(freq.slots);
    return wasmgear_ok_buf(&out);
}

/* ---- the job ------------------------------------------------------------------------- */

/* Where byte `pos` of the input is, as Python's json module says it. */
static void where(const uint8_t *s, size_t pos, size_t *line, size_t *column, size_t *chr) {
    size_t l = 1, c = 0, line_start = 0;
    for (size_t i = 0; i < pos; i++) {
        if ((s[i] & 0xC0) == 0x80) continue;
        if (s[i] == '\n') {
            l++;
            line_start = c + 1;
        }
        c++;
    }
    *line = l;
    *column = c - line_start + 1;
    *chr = c;
}

static wasmgear_result wordcount(const wasmgear_job *job, const uint8_t *input, size_t len) {
    (void)job;
    size_t valid = wasmgear_utf8_valid_up_to(input, len);
    if (valid != len)
        return wasmgear_fail("input is not valid UTF-8: cannot decode byte 0x%02x in position %zu",
                             input[valid], valid);

    json p = {input, len, 0, NULL, 0};
    request r;
    if (!read_request(&p, &r)) {
        free(r.text.bytes);
        size_t line, column, chr;
        where(input, p.error_pos, &line, &column, &chr);
        return wasmgear_fail("input is not valid JSON: %s: line %zu column %zu (char %zu)",
                             p.error, line, column, chr);
    }
    if (r.kind != J_OBJECT)
        return wasmgear_fail("wordcount expects a JSON object {\"text\": \"...\"}, got %s",
                             kind_name(r.kind));
    wasmgear_result result;
    if (r.fail_retry) {
        result = wasmgear_retry("asked to retry");
    } else if (r.text_kind == J_INVALID) {
        result = wasmgear_fail("wordcount expects a JSON object {\"text\": \"...\"}: \"text\" is missing");
    } else if (r.text_kind != J_STRING) {
        result = wasmgear_fail("\"text\" must be a string, got %s", kind_name(r.text_kind));
    } else if (r.text.lone) {
        result = wasmgear_fail("\"text\" holds a lone surrogate \\u%04lx, which is not Unicode",
                               r.text.lone);
    } else {
        size_t chars = 0;
        for (size_t i = 0; i < r.text.len; i++) chars += (r.text.bytes[i] & 0xC0) != 0x80;
        wasmgear_log_info("counting %zu characters", chars);
        result = count(r.text.bytes, r.text.len, chars, r.delay_ms);
    }
    free(r.text.bytes);
    return result;
}

WASMGEAR_JOB(wordcount)
