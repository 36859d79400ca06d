/* A laya-eval policy in C, written from docs/formats.md ("The stdio policy protocol") alone.
 *
 * Rule (the same as fake_policies.brightest_column, so the test can compare the two): press FIRE
 * when the current screen equals the previous one (an episode's first decision, or just after an
 * automatic FIRE) and the game has FIRE; otherwise move toward the brightest column of the lower
 * half of the current screen (LEFT below 45% of the width, RIGHT above 55%), else action 0.
 *
 *     cc -O2 -o stdio_policy stdio_policy.c
 *     laya-eval run --policy cmd:./stdio_policy --games Breakout
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char line[1 << 20];
static char names[32][32];
static int n_actions = 0;

/* The integer after "key": in a JSON line, or -1. */
static long int_field(const char *json, const char *key) {
    char pattern[64];
    snprintf(pattern, sizeof pattern, "\"%s\"", key);
    const char *p = strstr(json, pattern);
    if (!p) return -1;
    p += strlen(pattern);
    while (*p == ' ' || *p == ':') p++;
    return strtol(p, NULL, 10);
}

/* Whether the message's "type" is `type`. */
static int is_type(const char *json, const char *type) {
    char pattern[64];
    snprintf(pattern, sizeof pattern, "\"type\": \"%s\"", type);
    return strstr(json, pattern) != NULL;
}

/* The "actions" list of a reset message: names in order. */
static void read_actions(const char *json) {
    const char *p = strstr(json, "\"actions\"");
    n_actions = 0;
    if (!p) return;
    p = strchr(p, '[');
    while (p && *p && *p != ']' && n_actions < 32) {
        const char *start = strchr(p, '"');
        if (!start) break;
        const char *end = strchr(start + 1, '"');
        if (!end) break;
        size_t len = (size_t)(end - start - 1) < 31 ? (size_t)(end - start - 1) : 31;
        memcpy(names[n_actions], start + 1, len);
        names[n_actions][len] = '\0';
        n_actions++;
        p = end + 1;
        while (*p == ',' || *p == ' ') p++;
    }
}

static int action_index(const char *name) {
    for (int i = 0; i < n_actions; i++)
        if (strcmp(names[i], name) == 0) return i;
    return -1;
}

static int choose(const unsigned char *cur, const unsigned char *prev, long h, long w, long c) {
    long size = h * w * c;
    int fire = action_index("FIRE"), left = action_index("LEFT"), right = action_index("RIGHT");
    if (fire >= 0 && memcmp(cur, prev, (size_t)size) == 0) return fire;
    long best = -1, best_col = 0;
    for (long x = 0; x < w; x++) {
        long sum = 0;
        for (long y = h / 2; y < h; y++)
            for (long k = 0; k < c; k++) sum += cur[(y * w + x) * c + k];
        if (sum > best) best = sum, best_col = x;
    }
    double target = (double)best_col / (double)w;
    if (target < 0.45 && left >= 0) return left;
    if (target > 0.55 && right >= 0) return right;
    return 0;
}

int main(void) {
    while (fgets(line, sizeof line, stdin)) {
        if (is_type(line, "hello")) {
            printf("{\"name\": \"c-brightest-column\", \"language\": \"C\"}\n");
        } else if (is_type(line, "reset")) {
            read_actions(line);
            printf("{\"ok\": true}\n");
        } else if (is_type(line, "act")) {
            long n = int_field(line, "n"), h = int_field(line, "height"), w = int_field(line, "width");
            long c = int_field(line, "channels"), nbytes = int_field(line, "nbytes");
            unsigned char *frames = malloc((size_t)nbytes);
            if (!frames || nbytes != 2 * n * h * w * c || fread(frames, 1, (size_t)nbytes, stdin) != (size_t)nbytes) {
                printf("{\"error\": \"could not read %ld frame bytes\"}\n", nbytes);
                fflush(stdout);
                free(frames);
                continue;
            }
            printf("{\"actions\": [");
            for (long i = 0; i < n; i++) {
                const unsigned char *cur = frames + i * h * w * c;       /* the N current screens, */
                const unsigned char *prev = frames + (n + i) * h * w * c; /* then the N previous ones */
                printf("%s%d", i ? ", " : "", choose(cur, prev, h, w, c));
            }
            printf("]}\n");
            free(frames);
        } else if (is_type(line, "close")) {
            return 0;
        } else {
            printf("{\"error\": \"unknown message\"}\n");
        }
        fflush(stdout);
    }
    return 0;
}
