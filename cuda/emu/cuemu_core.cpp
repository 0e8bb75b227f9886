/*
 * cuemu_core.cpp: the fiber engine: stacks, context switch, the per-block scheduler, block
 * barriers, warp collectives, shared memory arenas and kernel launches. See cuda_emu.h for the
 * model; this file is its implementation.
 */
#include "cuda/emu/cuemu_internal.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include <mutex>
#include <string>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define CUEMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CUEMU_ASAN 1
#endif
#endif
#ifdef CUEMU_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

#if defined(__x86_64__) && !defined(PLLM_CUEMU_UCONTEXT)
#define CUEMU_ASM_SWITCH 1
#else
#include <ucontext.h>
#endif

/* ---- context switch ------------------------------------------------------------------------ */
#ifdef CUEMU_ASM_SWITCH
/* cuemu_switch(save, load): push the callee-saved registers (System V: rbx, rbp, r12-r15) and
 * the SSE/x87 control words on the current stack, store the stack pointer in *save, load `load`
 * as the stack pointer and pop the same frame from it. A new fiber's stack is prepared to look
 * like such a frame whose return address is the fiber's entry function. */
extern "C" void cuemu_switch(void **save, void *load);
__asm__(".text\n"
        ".globl cuemu_switch\n"
        ".hidden cuemu_switch\n"
        ".type cuemu_switch,@function\n"
        "cuemu_switch:\n"
        "    pushq %rbp\n"
        "    pushq %rbx\n"
        "    pushq %r12\n"
        "    pushq %r13\n"
        "    pushq %r14\n"
        "    pushq %r15\n"
        "    subq $8, %rsp\n"
        "    stmxcsr (%rsp)\n"
        "    fnstcw 4(%rsp)\n"
        "    movq %rsp, (%rdi)\n"
        "    movq %rsi, %rsp\n"
        "    ldmxcsr (%rsp)\n"
        "    fldcw 4(%rsp)\n"
        "    addq $8, %rsp\n"
        "    popq %r15\n"
        "    popq %r14\n"
        "    popq %r13\n"
        "    popq %r12\n"
        "    popq %rbx\n"
        "    popq %rbp\n"
        "    ret\n"
        ".size cuemu_switch,.-cuemu_switch\n");
#endif

namespace cuemu
{
namespace detail
{

thread_local block_ctx *t_block = nullptr;

namespace
{

enum class fst : uint8_t { runnable, running, bar_wait, warp_wait, done };

struct fiber {
    thread_ctx ctx;
    fst st;
    char *stack_lo; /* lowest usable byte; the guard page is just below */
    size_t stack_size;
#ifdef CUEMU_ASM_SWITCH
    void *sp; /* saved stack pointer while switched out */
#else
    ucontext_t uc;
#endif
#ifdef CUEMU_ASAN
    void *fake_stack;
#endif
    /* where a waiting fiber waits (for deadlock reports) */
    const char *wait_name, *wait_file;
    int wait_line;
};

/* A pending warp collective: the lanes of `mask` that have arrived so far. Lanes with disjoint
 * masks may run separate collectives at the same time (CUDA allows it). */
struct warp_group {
    wop op;
    unsigned mask, arrived;
    int width;
    const char *name, *file;
    int line;
};

struct warp_state {
    unsigned exists; /* lanes that exist (the last warp of a block may be partial) */
    unsigned live;   /* existing lanes that have not returned */
    unsigned n_groups;
    warp_group groups[32];
    uint64_t in[32], out[32]; /* per lane */
    int param[32];
};

struct static_alloc {
    const shared_site *site;
    size_t off, bytes;
};

/* Fiber stacks of one host thread: n slots of [guard page][stack], reused by every launch. */
struct stack_pool {
    char *base = nullptr;
    size_t map_len = 0, slot = 0, stack = 0, guard = 0;
    unsigned n = 0;
    char *altstack = nullptr;
    size_t altstack_len = 0;
#ifdef CUEMU_ASAN
    /* ASan's fake stack (detect_stack_use_after_return) of each slot, kept from one block to the
     * next like the stack itself: a fiber that finishes saves it instead of destroying it, the
     * next fiber of the slot takes it over. Creating and destroying one per emulated thread
     * (an mmap of ~1.5 MiB, page faults, munmap) cost ~9x the kernels' own time under ASan. A
     * finished fiber has returned from every frame, so its fake stack holds no live frame.
     * After a failed block (fibers abandoned or ended mid-kernel) the slots start afresh: those
     * fake stacks are left mapped, as abandoned fibers' always were. */
    std::vector<void *> fake;
#endif
    ~stack_pool();
};

constexpr unsigned char kPoison = 0xff; /* NaN in f32, f16 and bf16 */
constexpr unsigned char kCanary = 0xce;
constexpr size_t kCanaryBytes = 32;
constexpr size_t kMaxStaticAllocs = 64;

struct block_exec : block_ctx {
    const launch_site *site = nullptr;
    kernel_body *body = nullptr;
    unsigned n_threads = 0, n_done = 0;
    std::vector<fiber> fibers;
    std::vector<warp_state> warps;
    std::vector<fiber *> queue; /* ring buffer; a fiber is in it at most once */
    unsigned q_head = 0, q_count = 0;
    /* block barrier */
    unsigned bar_arrived = 0;
    bar_kind bar_k = bar_kind::plain;
    const char *bar_file = nullptr;
    int bar_line = 0;
    int bar_acc = 0, bar_result = 0;
    /* shared memory: [dynamic][canary][static 0][canary][static 1][canary]... */
    unsigned char *arena = nullptr;
    size_t arena_cap = 0, dyn_bytes = 0, static_used = 0, static_limit = 0, static_hi = 0;
    std::vector<static_alloc> statics;
    /* failure */
    bool failed = false;
    cudaError_t err = cudaSuccess;
    std::string error;
    /* scheduler context */
#ifdef CUEMU_ASM_SWITCH
    void *sched_sp = nullptr;
#else
    ucontext_t sched_uc;
#endif
#ifdef CUEMU_ASAN
    void *sched_fake = nullptr;
    const void *sched_bottom = nullptr;
    size_t sched_size = 0;
#endif
    uint64_t switches = 0, barriers = 0, warp_ops = 0;
    bool reverse = false; /* run this block's fibers in reverse order */

    /* the running fiber (its thread_ctx is the fiber's first member) */
    fiber *cur_fiber()
    {
        return reinterpret_cast<fiber *>(cur);
    }
};

static_assert(offsetof(fiber, ctx) == 0, "fiber::ctx must come first");

thread_local stack_pool *t_pool = nullptr;
thread_local size_t t_stack_bytes = 0; /* 0: default */
std::atomic<bool> g_verbose{true};

size_t page_size()
{
    return (size_t)sysconf(_SC_PAGESIZE);
}

size_t default_stack_bytes()
{
    const char *e = getenv("PLLM_CUEMU_STACK_KB");
    long kb = e ? strtol(e, nullptr, 10) : 0;
    return kb > 0 ? (size_t)kb * 1024 : (size_t)128 * 1024;
}

/* ---- guard-page diagnostics ---------------------------------------------------------------- */
struct sigaction g_old_segv, g_old_bus;
std::once_flag g_handler_once;

void write_str(const char *s)
{
    ssize_t r = write(2, s, strlen(s));
    (void)r;
}

void on_fault(int sig, siginfo_t *si, void *uctx)
{
    (void)uctx;
    char msg[1024];
    block_exec *b = static_cast<block_exec *>(t_block);
    stack_pool *p = t_pool;
    char *addr = static_cast<char *>(si->si_addr);
    if (b && b->cur) {
        const thread_ctx &t = *b->cur;
        bool overflow = false;
        if (p && addr >= p->base && addr < p->base + p->map_len) {
            size_t off = (size_t)(addr - p->base) % p->slot;
            overflow = off < p->guard;
        }
        if (overflow)
            snprintf(msg, sizeof msg,
                     "cuemu: kernel '%s' (launched at %s:%d), block (%u,%u,%u), thread (%u,%u,%u): "
                     "fiber stack overflow (guard page hit at %p; stacks are %zu KiB, raise "
                     "PLLM_CUEMU_STACK_KB)\n",
                     b->site->kernel, b->site->file, b->site->line, b->bid.x, b->bid.y, b->bid.z,
                     t.tid.x, t.tid.y, t.tid.z, (void *)addr, p->stack / 1024);
        else {
            char what[256];
            if (!rt::describe_address(addr, what, sizeof what))
                snprintf(what, sizeof what,
                         "not near any device allocation: a host or wild pointer");
            snprintf(msg, sizeof msg,
                     "cuemu: kernel '%s' (launched at %s:%d), block (%u,%u,%u), thread (%u,%u,%u): "
                     "invalid memory access at %p (%s)\n",
                     b->site->kernel, b->site->file, b->site->line, b->bid.x, b->bid.y, b->bid.z,
                     t.tid.x, t.tid.y, t.tid.z, (void *)addr, what);
        }
        write_str(msg);
    }
    /* Hand the fault to whoever handled it before (default: terminate; ASan: its report). */
    sigaction(sig, sig == SIGSEGV ? &g_old_segv : &g_old_bus, nullptr);
}

void install_fault_handler()
{
    std::call_once(g_handler_once, [] {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_fault;
        sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGSEGV, &sa, &g_old_segv);
        sigaction(SIGBUS, &sa, &g_old_bus);
    });
}

stack_pool::~stack_pool()
{
    if (altstack) {
        stack_t cur;
        if (sigaltstack(nullptr, &cur) == 0 && cur.ss_sp == altstack) {
            stack_t off;
            memset(&off, 0, sizeof off);
            off.ss_flags = SS_DISABLE;
            sigaltstack(&off, nullptr);
        }
        munmap(altstack, altstack_len);
    }
    if (base) munmap(base, map_len);
}

/* The calling thread's pool, (re)built for the configured stack size. */
stack_pool *get_pool()
{
    size_t want = t_stack_bytes ? t_stack_bytes : default_stack_bytes();
    size_t pg = page_size();
    want = (want + pg - 1) / pg * pg;
    if (t_pool && t_pool->stack == want) return t_pool;
    delete t_pool;
    t_pool = nullptr;
    install_fault_handler();
    stack_pool *p = new stack_pool;
    p->stack = want;
    p->guard = pg;
    p->slot = want + pg;
    p->n = CUEMU_MAX_THREADS;
#ifdef CUEMU_ASAN
    p->fake.assign(p->n, nullptr);
#endif
    p->map_len = p->slot * p->n;
    void *m = mmap(nullptr, p->map_len, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) {
        fprintf(stderr, "cuemu: cannot map %zu bytes of fiber stacks: %s\n", p->map_len,
                strerror(errno));
        abort();
    }
    p->base = static_cast<char *>(m);
    for (unsigned i = 0; i < p->n; i++) mprotect(p->base + (size_t)i * p->slot, pg, PROT_NONE);
    /* An alternate signal stack, so the overflow report can run when a fiber stack is full. */
    stack_t cur;
    if (sigaltstack(nullptr, &cur) == 0 && (cur.ss_flags & SS_DISABLE)) {
        p->altstack_len = 64 * 1024;
        void *a = mmap(nullptr, p->altstack_len, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (a != MAP_FAILED) {
            stack_t ss;
            memset(&ss, 0, sizeof ss);
            ss.ss_sp = a;
            ss.ss_size = p->altstack_len;
            if (sigaltstack(&ss, nullptr) == 0)
                p->altstack = static_cast<char *>(a);
            else
                munmap(a, p->altstack_len);
        }
    }
    t_pool = p;
    return p;
}

struct pool_reaper {
    ~pool_reaper()
    {
        delete t_pool;
        t_pool = nullptr;
    }
};
thread_local pool_reaper t_reaper;

/* ---- switching --------------------------------------------------------------------------- */
[[noreturn]] void fiber_entry();

#ifdef CUEMU_ASM_SWITCH
void init_stack(fiber *f)
{
    uintptr_t hi = ((uintptr_t)(f->stack_lo + f->stack_size)) & ~(uintptr_t)15;
    uint64_t *s = reinterpret_cast<uint64_t *>(hi);
    uint32_t csr[2];
    __asm__ volatile("stmxcsr %0" : "=m"(csr[0]));
    __asm__ volatile("fnstcw %0" : "=m"(csr[1]));
    *--s = 0; /* fake return address of fiber_entry (rsp % 16 == 8) */
    *--s = (uint64_t)(uintptr_t)&fiber_entry; /* popped by `ret` */
    for (int i = 0; i < 6; i++) *--s = 0;     /* rbp rbx r12 r13 r14 r15 */
    --s;
    memcpy(s, csr, 8); /* mxcsr | x87 control word */
    f->sp = s;
}
#else
void init_stack(fiber *f)
{
    getcontext(&f->uc);
    f->uc.uc_stack.ss_sp = f->stack_lo;
    f->uc.uc_stack.ss_size = f->stack_size;
    f->uc.uc_link = nullptr;
    makecontext(&f->uc, (void (*)())fiber_entry, 0);
}
#endif

block_exec *cur_exec()
{
    return static_cast<block_exec *>(t_block);
}

/* Scheduler -> fiber; returns when the fiber yields, finishes or fails. */
void resume(block_exec *b, fiber *f)
{
    b->cur = &f->ctx;
    f->st = fst::running;
    b->switches++;
#ifdef CUEMU_ASAN
    __sanitizer_start_switch_fiber(&b->sched_fake, f->stack_lo, f->stack_size);
#endif
#ifdef CUEMU_ASM_SWITCH
    cuemu_switch(&b->sched_sp, f->sp);
#else
    swapcontext(&b->sched_uc, &f->uc);
#endif
#ifdef CUEMU_ASAN
    __sanitizer_finish_switch_fiber(b->sched_fake, nullptr, nullptr);
#endif
    b->cur = nullptr;
}

/* Fiber -> scheduler; returns when the scheduler resumes this fiber. */
void yield(block_exec *b, fiber *f)
{
    b->switches++;
#ifdef CUEMU_ASAN
    __sanitizer_start_switch_fiber(&f->fake_stack, b->sched_bottom, b->sched_size);
#endif
#ifdef CUEMU_ASM_SWITCH
    cuemu_switch(&f->sp, b->sched_sp);
#else
    swapcontext(&f->uc, &b->sched_uc);
#endif
#ifdef CUEMU_ASAN
    __sanitizer_finish_switch_fiber(f->fake_stack, nullptr, nullptr);
#endif
}

/* Fiber -> scheduler, never to come back (its fake stack is kept for the slot's next fiber). */
[[noreturn]] void leave(block_exec *b, fiber *f)
{
    b->switches++;
#ifdef CUEMU_ASAN
    __sanitizer_start_switch_fiber(&f->fake_stack, b->sched_bottom, b->sched_size);
#endif
#ifdef CUEMU_ASM_SWITCH
    cuemu_switch(&f->sp, b->sched_sp);
#else
    swapcontext(&f->uc, &b->sched_uc);
#endif
    abort(); /* unreachable: a finished fiber is never resumed */
}

void push(block_exec *b, fiber *f)
{
    f->st = fst::runnable;
    b->queue[(b->q_head + b->q_count) % b->n_threads] = f;
    b->q_count++;
}

fiber *pop(block_exec *b)
{
    fiber *f = b->queue[b->q_head];
    b->q_head = (b->q_head + 1) % b->n_threads;
    b->q_count--;
    return f;
}

/* ---- errors -------------------------------------------------------------------------------- */
std::string where(block_exec *b, const thread_ctx *t)
{
    char buf[512];
    int n = snprintf(buf, sizeof buf, "kernel '%s' (launched at %s:%d), block (%u,%u,%u)",
                     b->site->kernel, b->site->file, b->site->line, b->bid.x, b->bid.y, b->bid.z);
    if (t && n > 0 && (size_t)n < sizeof buf)
        snprintf(buf + n, sizeof buf - (size_t)n, ", thread (%u,%u,%u)", t->tid.x, t->tid.y,
                 t->tid.z);
    return buf;
}

/* Record a block-level failure (scheduler context or fiber context). */
void block_fail(block_exec *b, cudaError_t err, const thread_ctx *t, const std::string &what)
{
    if (b->failed) return;
    b->failed = true;
    b->err = err;
    b->error = where(b, t) + ": " + what;
}

[[noreturn]] void fiber_fail(cudaError_t err, const char *fmt, va_list ap)
{
    block_exec *b = cur_exec();
    char buf[1024];
    vsnprintf(buf, sizeof buf, fmt, ap);
    fiber *f = b->cur_fiber();
    block_fail(b, err, &f->ctx, buf);
    f->st = fst::done;
    leave(b, f);
}

[[noreturn]] void fiber_failf(cudaError_t err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void fiber_failf(cudaError_t err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fiber_fail(err, fmt, ap);
}

const char *bar_name(bar_kind k)
{
    switch (k) {
    case bar_kind::plain:
        return "__syncthreads";
    case bar_kind::count:
        return "__syncthreads_count";
    case bar_kind::and_:
        return "__syncthreads_and";
    case bar_kind::or_:
        return "__syncthreads_or";
    }
    return "?";
}

/* ---- fiber entry and exit ------------------------------------------------------------------ */
void complete_warp(block_exec *b, warp_state &w, unsigned gi);

void fiber_exit(block_exec *b, fiber *f)
{
    b->n_done++;
    warp_state &w = b->warps[f->ctx.warp];
    w.live &= ~(1u << f->ctx.lane);
    f->st = fst::done;
    if (b->bar_arrived > 0)
        fiber_failf(cudaErrorLaunchFailure,
                    "returned while %u thread(s) wait at %s() at %s:%d; every thread of the block "
                    "must reach each barrier (CUDA leaves this undefined)",
                    b->bar_arrived, bar_name(b->bar_k), b->bar_file, b->bar_line);
    for (unsigned gi = 0; gi < w.n_groups;) {
        warp_group &g = w.groups[gi];
        unsigned need = g.mask & w.live;
        if ((g.arrived & need) == need)
            complete_warp(b, w, gi); /* removes group gi */
        else
            gi++;
    }
}

void fiber_entry()
{
    block_exec *b = cur_exec();
    fiber *f = b->cur_fiber();
#ifdef CUEMU_ASAN
    /* the slot's fake stack from an earlier block (nullptr: ASan makes one on first use) */
    __sanitizer_finish_switch_fiber(f->fake_stack, &b->sched_bottom, &b->sched_size);
#endif
    b->body->run();
    fiber_exit(b, f);
    leave(b, f);
}

/* ---- warp collectives -------------------------------------------------------------------- */
void complete_warp(block_exec *b, warp_state &w, unsigned gi)
{
    warp_group g = w.groups[gi];
    w.groups[gi] = w.groups[--w.n_groups]; /* remove it (order does not matter) */
    fiber *me = b->cur_fiber();
    size_t warp_base = (size_t)me->ctx.warp * 32;
    unsigned arrived = g.arrived;
    bool is_shfl = g.op == wop::shfl_idx || g.op == wop::shfl_up || g.op == wop::shfl_down ||
                   g.op == wop::shfl_xor;
    uint64_t res = 0;
    if (!is_shfl) {
        /* votes and reductions: one result for every participant */
        uint64_t acc = 0;
        bool first = true;
        for (unsigned l = 0; l < 32; l++) {
            if (!(arrived >> l & 1)) continue;
            uint32_t u = (uint32_t)w.in[l];
            int32_t v = (int32_t)u;
            switch (g.op) {
            case wop::ballot:
                acc |= (uint64_t)(u != 0) << l;
                break;
            case wop::any:
                acc |= (u != 0);
                break;
            case wop::all:
                acc = first ? (u != 0) : (acc && u != 0);
                break;
            case wop::reduce_add_u:
            case wop::reduce_add_i:
                acc = (uint32_t)(acc + u);
                break;
            case wop::reduce_min_u:
                acc = first || u < (uint32_t)acc ? u : acc;
                break;
            case wop::reduce_max_u:
                acc = first || u > (uint32_t)acc ? u : acc;
                break;
            case wop::reduce_min_i:
                acc = first || v < (int32_t)(uint32_t)acc ? u : acc;
                break;
            case wop::reduce_max_i:
                acc = first || v > (int32_t)(uint32_t)acc ? u : acc;
                break;
            case wop::reduce_and:
                acc = first ? u : (acc & u);
                break;
            case wop::reduce_or:
                acc |= u;
                break;
            case wop::reduce_xor:
                acc ^= u;
                break;
            default:
                break;
            }
            first = false;
        }
        res = acc;
    }
    for (unsigned l = 0; l < 32; l++) {
        if (!(arrived >> l & 1)) continue;
        if (!is_shfl) {
            w.out[l] = res;
            continue;
        }
        /* The PTX shfl.sync lane arithmetic: c = ((32 - width) << 8) | clamp, where clamp is 0
         * for .up and 31 otherwise; b is the lane operand's low 5 bits. */
        unsigned segmask = (unsigned)(32 - g.width) & 31u;
        unsigned clamp = g.op == wop::shfl_up ? 0u : 31u;
        unsigned bval = (unsigned)w.param[l] & 31u;
        unsigned max_lane = (l & segmask) | (clamp & ~segmask);
        unsigned min_lane = l & segmask;
        int j = (int)l;
        bool ok = true;
        switch (g.op) {
        case wop::shfl_up:
            j = (int)l - (int)bval;
            ok = j >= (int)max_lane;
            break;
        case wop::shfl_down:
            j = (int)(l + bval);
            ok = j <= (int)max_lane;
            break;
        case wop::shfl_xor:
            j = (int)(l ^ bval);
            ok = j <= (int)max_lane;
            break;
        case wop::shfl_idx:
            j = (int)(min_lane | (bval & ~segmask));
            ok = j <= (int)max_lane;
            break;
        default:
            break;
        }
        if (!ok) j = (int)l;
        if (!(arrived >> j & 1)) {
            const char *why = !(w.exists >> j & 1)
                                  ? "does not exist (the block's last warp is partial)"
                              : !(w.live >> j & 1) ? "has returned"
                              : !(g.mask >> j & 1) ? "is not in the mask"
                                                   : "did not take part";
            char buf[512];
            snprintf(
                buf, sizeof buf,
                "%s(mask 0x%08x, width %d) at %s:%d: lane %u reads lane %d, which %s; its value is "
                "undefined on a GPU",
                g.name, g.mask, g.width, g.file, g.line, l, j, why);
            block_fail(b, cudaErrorLaunchFailure, &b->fibers[warp_base + l].ctx, buf);
            me->st = fst::done;
            leave(b, me);
        }
        w.out[l] = w.in[j];
    }
    /* release the waiting lanes (the completing lane, if it took part, carries on) */
    for (unsigned i = 0; i < 32; i++) {
        unsigned l = b->reverse ? 31 - i : i;
        if (!(arrived >> l & 1)) continue;
        fiber *f = &b->fibers[warp_base + l];
        if (f != me && f->st == fst::warp_wait) push(b, f);
    }
    b->warp_ops++;
}

} /* namespace */

/* ---- entry points used by cuda_emu.h -------------------------------------------------------- */

void outside_kernel(const char *what)
{
    fprintf(stderr,
            "cuemu: %s used outside an emulated kernel (call kernels through PLLM_LAUNCH)\n", what);
    abort();
}

void kernel_fail(const char *fmt, ...)
{
    if (!t_block || !t_block->cur) outside_kernel("a device-side failure");
    va_list ap;
    va_start(ap, fmt);
    fiber_fail(cudaErrorLaunchFailure, fmt, ap);
}

uint64_t warp_op(wop op, unsigned mask, uint64_t value, int param, int width, const char *name,
                 const char *file, int line)
{
    if (!t_block || !t_block->cur) outside_kernel(name);
    block_exec *b = cur_exec();
    fiber *f = b->cur_fiber();
    unsigned lane = f->ctx.lane, bit = 1u << lane;
    warp_state &w = b->warps[f->ctx.warp];
    if (!(mask & bit))
        fiber_failf(cudaErrorLaunchFailure,
                    "%s(mask 0x%08x) at %s:%d: the mask does not include the calling lane %u", name,
                    mask, file, line, lane);
    if (width < 1 || width > 32 || (width & (width - 1)))
        fiber_failf(cudaErrorLaunchFailure,
                    "%s at %s:%d: width %d is not a power of two in [1, 32]", name, file, line,
                    width);
    /* Join the pending collective of the same kind and mask, or start one. Lanes may wait in
     * different collectives at once (disjoint masks, or lanes that reach a full-warp call while
     * others still finish a half-warp one); lanes named in a mask that never make the same call
     * leave the collective incomplete, which the scheduler reports as a deadlock. */
    unsigned gi = 0;
    for (; gi < w.n_groups; gi++)
        if (w.groups[gi].op == op && w.groups[gi].mask == mask && w.groups[gi].width == width)
            break;
    if (gi == w.n_groups) w.groups[w.n_groups++] = warp_group{op, mask, 0, width, name, file, line};
    warp_group &g = w.groups[gi];
    w.in[lane] = value;
    w.param[lane] = param;
    g.arrived |= bit;
    unsigned need = g.mask & w.live;
    if ((g.arrived & need) == need) {
        complete_warp(b, w, gi);
    } else {
        f->st = fst::warp_wait;
        f->wait_name = name;
        f->wait_file = file;
        f->wait_line = line;
        yield(b, f);
    }
    return w.out[lane];
}

int block_barrier(bar_kind kind, int pred, const char *file, int line)
{
    if (!t_block || !t_block->cur) outside_kernel(bar_name(kind));
    block_exec *b = cur_exec();
    fiber *f = b->cur_fiber();
    if (b->n_done > 0) {
        const fiber *gone = nullptr;
        for (const fiber &x : b->fibers)
            if (x.st == fst::done) {
                gone = &x;
                break;
            }
        fiber_failf(
            cudaErrorLaunchFailure,
            "waits at %s() at %s:%d but thread (%u,%u,%u) (and %u other(s)) already returned; "
            "every thread of the block must reach each barrier (CUDA leaves this undefined)",
            bar_name(kind), file, line, gone ? gone->ctx.tid.x : 0, gone ? gone->ctx.tid.y : 0,
            gone ? gone->ctx.tid.z : 0, b->n_done - 1);
    }
    if (b->bar_arrived == 0) {
        b->bar_k = kind;
        b->bar_file = file;
        b->bar_line = line;
        b->bar_acc = kind == bar_kind::and_ ? 1 : 0;
    } else if (b->bar_k != kind || b->bar_line != line || strcmp(b->bar_file, file) != 0) {
        fiber_failf(
            cudaErrorLaunchFailure,
            "waits at %s() at %s:%d while %u thread(s) wait at %s() at %s:%d; threads of a block "
            "must meet at the same barrier",
            bar_name(kind), file, line, b->bar_arrived, bar_name(b->bar_k), b->bar_file,
            b->bar_line);
    }
    switch (kind) {
    case bar_kind::plain:
        break;
    case bar_kind::count:
        b->bar_acc += pred;
        break;
    case bar_kind::and_:
        b->bar_acc = b->bar_acc && pred;
        break;
    case bar_kind::or_:
        b->bar_acc = b->bar_acc || pred;
        break;
    }
    b->bar_arrived++;
    if (b->bar_arrived == b->n_threads) {
        b->bar_result = b->bar_acc;
        b->bar_arrived = 0;
        b->barriers++;
        for (unsigned i = 0; i < b->n_threads; i++) {
            fiber &x = b->fibers[b->reverse ? b->n_threads - 1 - i : i];
            if (x.st == fst::bar_wait) push(b, &x);
        }
    } else {
        f->st = fst::bar_wait;
        f->wait_name = bar_name(kind);
        f->wait_file = file;
        f->wait_line = line;
        yield(b, f);
    }
    return b->bar_result;
}

void atomic_point(const char *what)
{
    if (!t_block || !t_block->cur) outside_kernel(what);
    block_exec *b = cur_exec();
    fiber *f = b->cur_fiber();
    if (b->n_threads == 1) return;
    push(b, f);
    yield(b, f);
}

void *shared_static(const shared_site *site, size_t bytes, size_t align)
{
    if (!t_block || !t_block->cur) outside_kernel("shared memory");
    block_exec *b = cur_exec();
    for (const static_alloc &a : b->statics)
        if (a.site == site) return b->arena + a.off;
    if (b->statics.size() >= kMaxStaticAllocs)
        fiber_failf(cudaErrorLaunchFailure, "more than %zu shared arrays in one kernel",
                    kMaxStaticAllocs);
    if (b->static_used + bytes > b->static_limit)
        fiber_failf(cudaErrorInvalidValue,
                    "shared array '%s' (%s:%d, %zu bytes) takes static shared memory to %zu bytes, "
                    "over the "
                    "%zu-byte limit (%zu bytes of dynamic shared memory are also in use)",
                    site->name, site->file, site->line, bytes, b->static_used + bytes,
                    b->static_limit, b->dyn_bytes);
    size_t start = (b->dyn_bytes + kCanaryBytes + 15) / 16 * 16; /* static area */
    size_t off = start;
    if (!b->statics.empty()) {
        const static_alloc &last = b->statics.back();
        off = last.off + last.bytes + kCanaryBytes;
    }
    off = (off + align - 1) / align * align;
    if (off + bytes + kCanaryBytes > b->arena_cap)
        fiber_failf(cudaErrorLaunchFailure, "shared arena exhausted (internal limit)");
    b->statics.push_back({site, off, bytes});
    b->static_used += bytes;
    memset(b->arena + off, kPoison, bytes);
    memset(b->arena + off + bytes, kCanary, kCanaryBytes);
    if (off + bytes + kCanaryBytes > b->static_hi) b->static_hi = off + bytes + kCanaryBytes;
    return b->arena + off;
}

void *shared_dynamic(size_t *bytes)
{
    if (!t_block || !t_block->cur) outside_kernel("dynamic shared memory");
    block_exec *b = cur_exec();
    *bytes = b->dyn_bytes;
    return b->arena;
}

void shared_oob(const shared_site *site, long long index, size_t bound, int dim)
{
    if (!t_block || !t_block->cur) outside_kernel("shared memory");
    fiber_failf(cudaErrorIllegalAddress,
                "shared memory '%s' (declared at %s:%d): %sindex %lld out of bounds [0, %zu)",
                site->name, site->file, site->line, dim ? "row " : "", index, bound);
}

namespace
{

/* ---- blocks and grids ------------------------------------------------------------------ */
/* The order in which a block's fibers start and are released from barriers. Correct kernels do
 * not depend on it; alternating it between blocks makes a missing barrier (a thread reading
 * what another writes with no __syncthreads/__syncwarp between) give wrong results in every
 * other block instead of passing by luck. PLLM_CUEMU_ORDER=forward|reverse|alternate. */
enum class order_mode { forward, reverse, alternate };

order_mode thread_order()
{
    const char *e = getenv("PLLM_CUEMU_ORDER");
    if (e && !strcmp(e, "forward")) return order_mode::forward;
    if (e && !strcmp(e, "reverse")) return order_mode::reverse;
    return order_mode::alternate;
}

std::string deadlock_report(block_exec *b)
{
    std::string r = "deadlock: no thread can proceed.";
    char buf[512];
    if (b->bar_arrived) {
        snprintf(buf, sizeof buf, " %u of %u thread(s) wait at %s() at %s:%d.", b->bar_arrived,
                 b->n_threads, bar_name(b->bar_k), b->bar_file, b->bar_line);
        r += buf;
    }
    int shown = 0;
    for (size_t wi = 0; wi < b->warps.size() && shown < 4; wi++) {
        warp_state &w = b->warps[wi];
        for (unsigned gi = 0; gi < w.n_groups && shown < 4; gi++, shown++) {
            const warp_group &g = w.groups[gi];
            unsigned missing = (g.mask & w.live) & ~g.arrived;
            int ml = missing ? __builtin_ctz(missing) : 0;
            const fiber &mf = b->fibers[wi * 32 + (size_t)ml];
            snprintf(buf, sizeof buf,
                     " Warp %zu: lanes 0x%08x wait in %s(mask 0x%08x) at %s:%d for lanes 0x%08x "
                     "(lane %d waits in %s "
                     "at %s:%d).",
                     wi, g.arrived, g.name, g.mask, g.file, g.line, missing, ml,
                     mf.wait_name ? mf.wait_name : "?", mf.wait_file ? mf.wait_file : "?",
                     mf.wait_line);
            r += buf;
        }
    }
    if (shown) r += " The lanes named in a warp call's mask must all make that same call.";
    return r;
}

void check_shared_canaries(block_exec *b)
{
    auto bad = [](const unsigned char *p) {
        for (size_t i = 0; i < kCanaryBytes; i++)
            if (p[i] != kCanary) return true;
        return false;
    };
    if (bad(b->arena + b->dyn_bytes)) {
        block_fail(b, cudaErrorIllegalAddress, nullptr,
                   "dynamic shared memory (" + std::to_string(b->dyn_bytes) +
                       " bytes) was written past its end (through a raw pointer)");
        return;
    }
    for (const static_alloc &a : b->statics)
        if (bad(b->arena + a.off + a.bytes)) {
            char buf[256];
            snprintf(buf, sizeof buf,
                     "shared array '%s' (declared at %s:%d, %zu bytes) was written past its end "
                     "(through a raw pointer)",
                     a.site->name, a.site->file, a.site->line, a.bytes);
            block_fail(b, cudaErrorIllegalAddress, nullptr, buf);
            return;
        }
}

bool run_block(block_exec *b, stack_pool *pool)
{
    unsigned n = b->n_threads;
    unsigned bx = b->bdim.x, by = b->bdim.y;
    for (unsigned i = 0; i < n; i++) {
        fiber &f = b->fibers[i];
        f.ctx.tid = make_uint3(i % bx, (i / bx) % by, i / (bx * by));
        f.ctx.linear = i;
        f.ctx.warp = i / 32;
        f.ctx.lane = i % 32;
        f.stack_lo = pool->base + (size_t)i * pool->slot + pool->guard;
        f.stack_size = pool->stack;
        f.wait_name = f.wait_file = nullptr;
        f.wait_line = 0;
#ifdef CUEMU_ASAN
        f.fake_stack = pool->fake[i];
        pool->fake[i] = nullptr; /* back in the pool when this fiber finishes */
#endif
        init_stack(&f);
        f.st = fst::runnable;
    }
    for (unsigned i = 0; i < n; i++) b->queue[i] = &b->fibers[b->reverse ? n - 1 - i : i];
    for (size_t wi = 0; wi < b->warps.size(); wi++) {
        warp_state &w = b->warps[wi];
        unsigned lanes = n - (unsigned)wi * 32 >= 32 ? 32 : n - (unsigned)wi * 32;
        w.exists = lanes == 32 ? 0xffffffffu : (1u << lanes) - 1;
        w.live = w.exists;
        w.n_groups = 0;
    }
    b->q_head = 0;
    b->q_count = n;
    b->n_done = 0;
    b->bar_arrived = 0;
    /* shared memory: poison what the previous block used, re-arm the dynamic canary */
    size_t hi =
        b->static_hi > b->dyn_bytes + kCanaryBytes ? b->static_hi : b->dyn_bytes + kCanaryBytes;
    memset(b->arena, kPoison, hi);
    memset(b->arena + b->dyn_bytes, kCanary, kCanaryBytes);
    b->statics.clear();
    b->static_used = 0;

    t_block = b;
    while (b->q_count && !b->failed) resume(b, pop(b));
    t_block = nullptr;
    if (!b->failed && b->n_done != n)
        block_fail(b, cudaErrorLaunchFailure, nullptr, deadlock_report(b));
    if (!b->failed) check_shared_canaries(b);
#ifdef CUEMU_ASAN
    if (b->failed) /* abandoned fibers leave poisoned frames behind: clean their stacks */
        for (unsigned i = 0; i < n; i++)
            ASAN_UNPOISON_MEMORY_REGION(b->fibers[i].stack_lo, b->fibers[i].stack_size);
    if (!b->failed) /* every fiber finished: their fake stacks serve the next block */
        for (unsigned i = 0; i < n; i++) pool->fake[i] = b->fibers[i].fake_stack;
#endif
    return !b->failed;
}

cudaError_t run_launch(const launch_site &site, const void *kernel_id, dim3 grid, dim3 block,
                       size_t shmem, const std::shared_ptr<kernel_body> &body,
                       const std::string &bad_arg)
{
    if (cudaError_t s = rt::sticky())
        return rt::fail(s, false,
                        "launch of kernel '%s' at %s:%d refused: an earlier error is sticky",
                        site.kernel, site.file, site.line);
    unsigned long long nt = (unsigned long long)block.x * block.y * block.z;
    if (block.x == 0 || block.y == 0 || block.z == 0 || grid.x == 0 || grid.y == 0 || grid.z == 0 ||
        block.x > 1024 || block.y > 1024 || block.z > 64 || nt > CUEMU_MAX_THREADS ||
        grid.x > 0x7fffffffu || grid.y > 65535 || grid.z > 65535)
        return rt::fail(
            cudaErrorInvalidConfiguration, false,
            "kernel '%s' at %s:%d: invalid launch configuration grid (%u,%u,%u) block (%u,%u,%u)",
            site.kernel, site.file, site.line, grid.x, grid.y, grid.z, block.x, block.y, block.z);
    int optin = rt::max_dynamic_smem(kernel_id);
    size_t dyn_limit = optin > 0 ? (size_t)optin : CUEMU_STATIC_SMEM;
    if (shmem > dyn_limit)
        return rt::fail(cudaErrorInvalidValue, false,
                        "kernel '%s' at %s:%d: %zu bytes of dynamic shared memory exceed the %zu "
                        "allowed (over %d "
                        "bytes needs cudaFuncSetAttribute(MaxDynamicSharedMemorySize))",
                        site.kernel, site.file, site.line, shmem, dyn_limit, CUEMU_STATIC_SMEM);
    if (!bad_arg.empty())
        return rt::fail(cudaErrorIllegalAddress, true, "kernel '%s' (launched at %s:%d): %s",
                        site.kernel, site.file, site.line, bad_arg.c_str());

    stack_pool *pool = get_pool();
    block_exec b;
    b.site = &site;
    b.body = body.get();
    b.bdim = block;
    b.gdim = grid;
    b.cur = nullptr;
    b.n_threads = (unsigned)nt;
    b.fibers.resize(nt);
    b.warps.resize((nt + 31) / 32);
    b.queue.resize(nt);
    b.dyn_bytes = shmem;
    size_t total_limit = optin > 0 ? CUEMU_OPTIN_SMEM : CUEMU_STATIC_SMEM;
    b.static_limit =
        CUEMU_STATIC_SMEM < total_limit - shmem ? CUEMU_STATIC_SMEM : total_limit - shmem;
    b.arena_cap = (shmem + kCanaryBytes + 15) / 16 * 16 + CUEMU_STATIC_SMEM +
                  kMaxStaticAllocs * (kCanaryBytes + 16);
    std::vector<unsigned char> arena(b.arena_cap);
    b.arena = arena.data();

    bool ok = true;
    uint64_t nblocks = 0;
    const order_mode order = thread_order();
    for (unsigned z = 0; z < grid.z && ok; z++)
        for (unsigned y = 0; y < grid.y && ok; y++)
            for (unsigned x = 0; x < grid.x && ok; x++) {
                b.bid = make_uint3(x, y, z);
                b.reverse = order == order_mode::reverse ||
                            (order == order_mode::alternate && (nblocks & 1));
                ok = run_block(&b, pool);
                nblocks++;
            }
    rt::counters &c = rt::stats();
    c.launches++;
    c.blocks += nblocks;
    c.threads += nblocks * nt;
    c.switches += b.switches;
    c.barriers += b.barriers;
    c.warp_ops += b.warp_ops;
    if (!ok) return rt::fail(b.err, true, "%s", b.error.c_str());
    char after[512];
    snprintf(after, sizeof after, "kernel '%s' (launched at %s:%d)", site.kernel, site.file,
             site.line);
    if (!rt::check_canaries(after)) return rt::sticky();
    return cudaSuccess;
}

} /* namespace */

bool device_pointer_ok(const void *p)
{
    return p == nullptr || rt::is_device_pointer(p) || rt::is_mapped_host_pointer(p);
}

bool struct_words_ok(const void *p, size_t n, const char *type, int arg, char *msg, size_t cap)
{
    const unsigned char *b = static_cast<const unsigned char *>(p);
    for (size_t off = 0; off + 8 <= n; off += 8) { /* pointers in structs are 8-aligned */
        uint64_t w;
        memcpy(&w, b + off, 8);
        std::string where = rt::host_memory_at((uintptr_t)w);
        if (where.empty()) continue;
        snprintf(msg, cap,
                 "argument %d (%s, passed by value) holds a host pointer at byte offset %zu: "
                 "0x%llx is %s, not device memory; a GPU faults when the kernel reads it "
                 "(allocate it with cudaMalloc and copy it there)",
                 arg, type, off, (unsigned long long)w, where.c_str());
        return false;
    }
    return true;
}

void check_host_context(const launch_site &site)
{
    if (t_block && t_block->cur)
        kernel_fail(
            "launches kernel '%s' at %s:%d: launching from a kernel (dynamic parallelism) is "
            "not emulated",
            site.kernel, site.file, site.line);
}

cudaError_t launch_grid(const launch_site &site, const void *kernel_id, dim3 grid, dim3 block,
                        size_t shmem, cudaStream_t stream, std::shared_ptr<kernel_body> body,
                        const char *bad_arg_msg)
{
    launch_site s = site;
    std::string bad = bad_arg_msg ? bad_arg_msg : "";
    return rt::submit(stream, [s, kernel_id, grid, block, shmem, body, bad]() {
        return run_launch(s, kernel_id, grid, block, shmem, body, bad);
    });
}

} /* namespace detail */
} /* namespace cuemu */

extern "C" void pllm_cuemu_set_stack_size(size_t bytes)
{
    cuemu::detail::t_stack_bytes = bytes < 16 * 1024 ? 16 * 1024 : bytes;
}

extern "C" void pllm_cuemu_get_stats(pllm_cuemu_stats *out)
{
    cuemu::rt::counters &c = cuemu::rt::stats();
    out->launches = c.launches;
    out->blocks = c.blocks;
    out->threads = c.threads;
    out->switches = c.switches;
    out->barriers = c.barriers;
    out->warp_collectives = c.warp_ops;
}

extern "C" void pllm_cuemu_set_verbose(int on)
{
    cuemu::detail::g_verbose = on != 0;
}

bool cuemu::rt::verbose()
{
    return cuemu::detail::g_verbose;
}
