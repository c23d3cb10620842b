/* The only JSON the probe needs: strings escaped per RFC 8259. */
#include "rtprobe.h"

#include <stdlib.h>
#include <string.h>

void json_str(FILE *f, const char *s)
{
    if (!s) {
        fputs("null", f);
        return;
    }
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
        case '"': fputs("\\\"", f); break;
        case '\\': fputs("\\\\", f); break;
        case '\n': fputs("\\n", f); break;
        case '\r': fputs("\\r", f); break;
        case '\t': fputs("\\t", f); break;
        default:
            if (*p < 0x20 || *p == 0x7f)
                fprintf(f, "\\u%04x", *p);
            else
                fputc(*p, f);
        }
    }
    fputc('"', f);
}

/* s as a quoted JSON string in out (cut to fit), for printf-built lines. */
const char *json_quote(const char *s, char *out, size_t size)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    json_str(f, s);
    fclose(f);
    if (len >= size) { /* cut inside the quotes, at a whole character or escape */
        size_t keep = 1, i = 1;
        while (i < len - 1) {
            size_t step = buf[i] != '\\' ? 1 : buf[i + 1] == 'u' ? 6 : 2;
            if (i + step + 2 > size)
                break;
            i += step;
            keep = i;
        }
        snprintf(out, size, "%.*s\"", (int)keep, buf);
    } else {
        memcpy(out, buf, len + 1);
    }
    free(buf);
    return out;
}
