/* describe_text.c — export.json's values as `ferry inspect` prints them: every string escaped
 * (text_quote: what reaches a terminal is escaped though the manifest was validated when
 * loaded), numbers only where they are integers, shapes, and file sizes. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "export/describe.h"
#include "util/text.h"

/* Several quoted strings go into one line: each result stays valid for the next QUOTE_RING - 1
 * calls on this thread. */
#define QUOTE_RING 16

const char *desc_quote(const char *text)
{
    static _Thread_local char ring[QUOTE_RING][1024];
    static _Thread_local int next;
    next = (next + 1) % QUOTE_RING;
    return text_quote(text ? text : "?", ring[next], sizeof ring[next]);
}

void desc_print_size(strbuf *b, const char *dir, const char *file)
{
    char path[8192];
    struct stat st;
    int n = snprintf(path, sizeof path, "%s/%s", dir, file);
    if (n < 0 || (size_t)n >= sizeof path) { /* never stat a path cut short */
        sb_printf(b, "    %-28s (%s)\n", desc_quote(file), strerror(ENAMETOOLONG));
        return;
    }
    if (stat(path, &st) != 0) {
        sb_printf(b, "    %-28s (missing)\n", desc_quote(file));
        return;
    }
    double size = (double)st.st_size;
    const char *unit = "B";
    if (size >= 1e9) size /= 1e9, unit = "GB";
    else if (size >= 1e6) size /= 1e6, unit = "MB";
    else if (size >= 1e3) size /= 1e3, unit = "KB";
    sb_printf(b, "    %-28s %8.1f %s\n", desc_quote(file), size, unit);
}

/* Numbers in export.json are integers as ferry writes them, but the file may have been edited:
 * one that is not an integer below 2^53 in magnitude is shown as "?" rather than converted
 * (converting 1e300 to an integer type is undefined behaviour). */
bool desc_int_value(const cJSON *v, long long *out)
{
    if (!cJSON_IsNumber(v))
        return false;
    double d = v->valuedouble;
    if (!(d > -9007199254740992.0 && d < 9007199254740992.0))  /* also false for NaN */
        return false;
    long long i = (long long)d;
    if ((double)i != d)
        return false;
    *out = i;
    return true;
}

const char *desc_int_text(const cJSON *v, char *buf, size_t size)
{
    long long i;
    if (!desc_int_value(v, &i))
        return "?";
    snprintf(buf, size, "%lld", i);
    return buf;
}

void desc_print_dims(const cJSON *arr, char *buf, size_t size)
{
    size_t len = 0;
    const cJSON *d;
    len += (size_t)snprintf(buf, size, "[");
    cJSON_ArrayForEach(d, arr) {
        if (len >= size)
            break;
        const char *sep = d->prev && d != arr->child ? ", " : "";
        char num[32];
        if (cJSON_IsNumber(d))
            len += (size_t)snprintf(buf + len, size - len, "%s%s", sep,
                                    desc_int_text(d, num, sizeof num));
        else if (cJSON_IsString(d))
            len += (size_t)snprintf(buf + len, size - len, "%s%s", sep, d->valuestring);
        else
            len += (size_t)snprintf(buf + len, size - len, "%s?", sep);
    }
    if (len < size)
        snprintf(buf + len, size - len, "]");
}

const char *desc_str(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : "?";
}

/* str, escaped for printing. */
const char *desc_qstr(const cJSON *o, const char *key)
{
    return desc_quote(desc_str(o, key));
}

long long desc_num(const cJSON *o, const char *key)
{
    long long i;
    return desc_int_value(cJSON_GetObjectItemCaseSensitive(o, key), &i) ? i : -1;
}
