/* test_text.c — text_quote, the escaping behind every message and printed name: what is escaped
 * (controls, C1, bidi, invisible characters, invalid UTF-8) and how, what is kept, and where a
 * long text is cut. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "ferry.h"
#include "util/err.h"
#include "util/text.h"

static void expect_quote(const char *in, const char *want)
{
    char buf[256], again[256];
    text_quote(in, buf, sizeof buf);
    if (strcmp(buf, want) != 0)
        fail_msg("quote of \"%s\": \"%s\", expected \"%s\"", in, buf, want);
    text_quote(buf, again, sizeof again);
    if (strcmp(again, buf) != 0)
        fail_msg("quoting is not idempotent: \"%s\" -> \"%s\"", buf, again);
}

static void test_escapes(void **state)
{
    (void)state;
    expect_quote("model.layers.0.q_proj.weight", "model.layers.0.q_proj.weight");
    expect_quote("a\x1b[2Jb\n\x7f", "a\\x1b[2Jb\\x0a\\x7f");
    /* C1: U+0080, U+009B (CSI), U+009F; the neighbours U+007E and U+00A0 stay. */
    expect_quote("\xc2\x80|\xc2\x9b" "31m|\xc2\x9f|~|\xc2\xa0",
                 "\\u0080|\\u009b31m|\\u009f|~|\xc2\xa0");
    /* Bidi embeddings, overrides, isolates and marks. */
    expect_quote("\xe2\x80\xaa\xe2\x80\xae\xe2\x81\xa6\xe2\x81\xa9\xe2\x80\x8f\xd8\x9c",
                 "\\u202a\\u202e\\u2066\\u2069\\u200f\\u061c");
    /* Invisible: zero-width space and joiner, soft hyphen, word joiner, BOM, line separator,
     * variation selector, Hangul filler. */
    expect_quote("\xe2\x80\x8b\xe2\x80\x8d\xc2\xad\xe2\x81\xa0\xef\xbb\xbf\xe2\x80\xa8"
                 "\xef\xb8\x8f\xe3\x85\xa4",
                 "\\u200b\\u200d\\u00ad\\u2060\\ufeff\\u2028\\ufe0f\\u3164");
    /* Above U+FFFF: a UTF-16 surrogate pair, as JSON spells it (tag A is U+E0041). */
    expect_quote("x\xf3\xa0\x81\x81y", "x\\udb40\\udc41y");
    /* Visible text outside ASCII is kept: accents, CJK, emoji. */
    expect_quote("caf\xc3\xa9 \xe6\xa8\xa1\xe5\x9e\x8b \xf0\x9f\x98\x80",
                 "caf\xc3\xa9 \xe6\xa8\xa1\xe5\x9e\x8b \xf0\x9f\x98\x80");
    /* Invalid UTF-8 byte by byte, valid neighbours kept: a lone C1 byte, a truncated sequence,
     * an overlong '/', a surrogate, a code point above U+10FFFF. */
    expect_quote("\x9b" "a\xc3" "b\xc0\xaf\xed\xa0\x80\xf4\x90\x80\x80\xc3\xa9",
                 "\\x9ba\\xc3b\\xc0\\xaf\\xed\\xa0\\x80\\xf4\\x90\\x80\\x80\xc3\xa9");
}

static void test_cut(void **state)
{
    (void)state;
    char buf[16];
    /* Room is kept for "..." and the NUL: 12 bytes of text fit in 16. */
    assert_string_equal(text_quote("0123456789ab", buf, sizeof buf), "0123456789ab");
    assert_string_equal(text_quote("0123456789abcdefgh", buf, sizeof buf), "0123456789ab...");
    /* Never inside an escape or a multi-byte sequence. */
    assert_string_equal(text_quote("0123456789\xc2\x9bxyz", buf, sizeof buf), "0123456789...");
    assert_string_equal(text_quote("0123456789\xc3\xa9xyzw", buf, sizeof buf),
                        "0123456789\xc3\xa9...");
    assert_string_equal(text_quote("", buf, sizeof buf), "");
}

/* Library messages are escaped as a whole, wherever their parts came from; the public
 * ferry_escape is the same function. */
static void test_messages(void **state)
{
    (void)state;
    fy_err err = {0};
    fy_fail(&err, FERRY_ERR_IO, "%s: cannot open", "/tmp/ck\xc2\x9bpt\xe2\x80\xae/\xff\n.json");
    assert_string_equal(err.msg, "/tmp/ck\\u009bpt\\u202e/\\xff\\x0a.json: cannot open");
    fy_refail(&err, FERRY_ERR_IO, "already '%s'", "quoted \\x1b");
    assert_string_equal(err.msg, "already 'quoted \\x1b'");
    char buf[64];
    assert_string_equal(ferry_escape("a\xe2\x80\xae", buf, sizeof buf), "a\\u202e");
    assert_string_equal(ferry_escape(NULL, buf, sizeof buf), "");
    assert_string_equal(ferry_escape("abc", buf, 4), "");
}

/* Every format (Cf) character is escaped: the prepended concatenation marks and format controls
 * the hostile review found printed raw, and their visible neighbours kept. */
static void test_format_characters(void **state)
{
    (void)state;
    static const uint32_t hidden[] = {
        0x00AD, 0x0600, 0x0601, 0x0602, 0x0603, 0x0604, 0x0605, 0x061C, 0x06DD, 0x070F,
        0x0890, 0x0891, 0x08E2, 0x180E, 0x200B, 0x200F, 0x202A, 0x202E, 0x2060, 0x2064,
        0x2066, 0x206F, 0xFEFF, 0xFFF9, 0xFFFB, 0x110BD, 0x110CD, 0x13430, 0x13438, 0x13439,
        0x1343F, 0x1BCA0, 0x1BCA3, 0x1D173, 0x1D17A, 0xE0001, 0xE0020, 0xE007F,
    };
    static const uint32_t visible[] = {
        0x00AC, 0x00AE, 0x0606, 0x061B, 0x06DC, 0x06DE, 0x070E, 0x0710, 0x088F, 0x0892,
        0x08E1, 0x08E3, 0x110BC, 0x110BE, 0x110CC, 0x1342F, 0x13440, 0x1BC9F, 0x1D172,
    };
    for (size_t i = 0; i < sizeof hidden / sizeof hidden[0]; i++)
        if (!text_hidden(hidden[i]))
            fail_msg("U+%04X is not escaped", (unsigned)hidden[i]);
    for (size_t i = 0; i < sizeof visible / sizeof visible[0]; i++)
        if (text_hidden(visible[i]))
            fail_msg("U+%04X is escaped", (unsigned)visible[i]);
    /* As printed: U+0600 U+06DD U+070F U+0890 U+08E2, then U+110BD U+13430 U+1BCA0. */
    expect_quote("1\xd8\x80" "2\xdb\x9d" "3\xdc\x8f" "4\xe0\xa2\x90" "5\xe0\xa3\xa2" "6",
                 "1\\u06002\\u06dd3\\u070f4\\u08905\\u08e26");
    expect_quote("a\xf0\x91\x82\xbd" "b\xf0\x93\x90\xb0" "c\xf0\x9b\xb2\xa0" "d",
                 "a\\ud804\\udcbdb\\ud80d\\udc30c\\ud82f\\udca0d");
}

/* text_hidden_at: the first byte text_quote would escape, for names refused outright. */
static void test_hidden_at(void **state)
{
    (void)state;
    static const struct { const char *text; size_t at; } cases[] = {
        {"LlamaForCausalLM", 16}, {"", 0}, {"caf\xc3\xa9 \xf0\x9f\x98\x80", 10},
        {"a\nb", 1}, {"ab\x7f", 2}, {"Llama\xc2\x9b" "31m", 5}, {"lla\xe2\x80\xaema", 3},
        {"si\xe2\x80\x8blu", 2}, {"x\xf3\xa0\x81\x81", 1}, {"ok\xff", 2}, {"\xc2", 0},
        {"\xed\xa0\x80", 0}, {"\xc2\xa0nbsp", 6},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t got = text_hidden_at(cases[i].text, strlen(cases[i].text));
        if (got != cases[i].at)
            fail_msg("case %zu: hidden at %zu, expected %zu", i, got, cases[i].at);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_escapes),
        cmocka_unit_test(test_cut),
        cmocka_unit_test(test_messages),
        cmocka_unit_test(test_hidden_at),
        cmocka_unit_test(test_format_characters),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
