/*
 * fuzz_chat.c: the chat template interpreter (tokenizer/chat_template.h) with arbitrary
 * templates and messages.
 *
 * Input: one flag byte, the template, then optionally a NUL byte followed by messages, each
 * "role\x1fcontent" and separated by \x1e (no messages part: a fixed system/user/assistant
 * conversation). Flag bits: 1 add_generation_prompt, 2 bos_token undefined, 4 eos_token
 * undefined, 8 a message with role None, 16 a message with content None.
 *
 * Properties: parse and render fail only with a message; a failed render appends nothing; a
 * render stays inside the limits it was given (small here, so loops and recursion that would
 * run away hit them quickly: output 256 KiB, memory 32 MiB, 200k steps, depth 32); rendering
 * twice gives the same bytes (a parsed template is immutable).
 */
#include "tests/fuzz/fuzz_common.h"

#include "tokenizer/chat_template.h"

#include <string.h>

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    return 0;
}

#define MAX_MSGS 16

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0) return 0;
    uint8_t flags = data[0];
    const char *tmpl = (const char *)data + 1;
    size_t rest = size - 1;
    const char *nul = memchr(tmpl, 0, rest);
    size_t tlen = nul ? (size_t)(nul - tmpl) : rest;

    /* messages: copied out so each string is NUL-terminated */
    char *store = NULL;
    pllm_chat_msg msgs[MAX_MSGS];
    size_t n_msgs = 0;
    if (nul) {
        size_t mlen = rest - tlen - 1;
        store = malloc(mlen + 1);
        if (!store) abort();
        memcpy(store, nul + 1, mlen);
        store[mlen] = 0;
        char *p = store, *end = store + mlen;
        while (p <= end && n_msgs < MAX_MSGS) {
            char *rs = memchr(p, '\x1e', (size_t)(end - p));
            if (rs) *rs = 0;
            char *us = strchr(p, '\x1f');
            if (us) *us = 0;
            msgs[n_msgs].role = p;
            msgs[n_msgs].content = us ? us + 1 : "";
            n_msgs++;
            if (!rs) break;
            p = rs + 1;
        }
    } else {
        msgs[0] = (pllm_chat_msg){"system", "You are a helpful assistant."};
        msgs[1] = (pllm_chat_msg){"user", "What is 2+2?"};
        msgs[2] = (pllm_chat_msg){"assistant", "4"};
        msgs[3] = (pllm_chat_msg){"user", "And 3+3? \xe4\xb8\xad\xf0\x9f\x98\x80"};
        n_msgs = 4;
    }
    if ((flags & 8) && n_msgs) msgs[0].role = NULL;
    if ((flags & 16) && n_msgs > 1) msgs[1].content = NULL;

    pllm_chat_template *t = NULL;
    pllm_status st = pllm_chat_template_parse(&t, tmpl, tlen, "fuzz");
    FUZZ_ERR_HAS_MSG(st);
    fuzz_note("parse", st);
    if (st != PLLM_OK) {
        FUZZ_CHECK(t == NULL, "template returned with an error");
        free(store);
        return 0;
    }
    pllm_chat_render_params rp = {
        .messages = msgs, .n_messages = n_msgs, .add_generation_prompt = flags & 1,
        .bos_token = (flags & 2) ? NULL : "<s>", .eos_token = (flags & 4) ? NULL : "</s>",
        .max_output_bytes = 256 << 10, .max_memory_bytes = 32 << 20, .max_steps = 200000, .max_depth = 32,
    };
    pllm_buf out = {0};
    pllm_buf_append(&out, "prefix", 6);
    st = pllm_chat_template_render(t, &rp, &out);
    FUZZ_ERR_HAS_MSG(st);
    fuzz_note("render", st);
    if (st != PLLM_OK) {
        FUZZ_CHECK(out.n == 6 && memcmp(out.s, "prefix", 6) == 0, "a failed render appended %zu bytes", out.n - 6);
    } else {
        FUZZ_CHECK(out.n - 6 <= rp.max_output_bytes, "output %zu bytes over the limit", out.n - 6);
    }
    /* the same bytes again (unless the template reads the clock) */
    if (st == PLLM_OK && !memmem(tmpl, tlen, "strftime", 8)) {
        pllm_buf again = {0};
        FUZZ_CHECK(pllm_chat_template_render(t, &rp, &again) == PLLM_OK, "second render failed: %s", pllm_errmsg());
        FUZZ_CHECK(again.n == out.n - 6 && (again.n == 0 || memcmp(again.s, out.s + 6, again.n) == 0),
                   "two renders differ");
        pllm_buf_free(&again);
    }
    pllm_buf_free(&out);
    pllm_chat_template_free(t);
    free(store);
    return 0;
}
