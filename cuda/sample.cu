/*
 * sample.cu: sampling on the device, the twin of pllm_sample (model/sampler.c) with the
 * semantics model/sampling.h states (see kernels.h for the contract). Only the sampled ids and
 * the requested logprobs leave the device.
 *
 * How each rule of sampling.h is met on a block of threads:
 *   - sanitising, the raw max, the raw arg-max and the log-softmax normaliser: a first kernel
 *     over n_parts chunks of each row (max, arg-max key, sum exp(l - max) in float terms summed
 *     in double), combined by the sampling kernel (sum_p sum_p exp(max_p - max) in double);
 *     plain greedy takes the raw arg-max from there and reads no row;
 *   - top-N raw logprobs: N block arg-max passes over the key (logit, -id), each excluding what
 *     the previous ones chose (ties: lower id first);
 *   - bans, then the repetition penalty applied once per distinct id (the first thread to flip
 *     the id's entry in `counts` applies it), then frequency/presence (counts accumulated with
 *     atomics, consumed by the first thread to take them back to 0); float arithmetic done
 *     exactly as the CPU does it (no contraction into FMAs); `counts` is left all zero;
 *   - greedy: a block arg-max over (processed logit, -id): the lowest id among the maxima;
 *   - top_k: a radix select (4 passes of 8 bits over an order-preserving key) finds the k-th
 *     largest processed logit, counting duplicates as the CPU's heap does;
 *   - min_p: the weight test w >= min_p;
 *   - top_p: a weighted radix select finds the logit L* where the mass of larger logits is
 *     below top_p * total and the mass of logits >= L* reaches it; of the ids tied at L*, the
 *     lowest-numbered c are kept, c counted with the CPU's running sum; a second radix select
 *     over ids finds the cut;
 *   - draw: each thread sums a contiguous range of ids, a block scan gives every range's prefix,
 *     and the thread whose range crosses u * total walks it in id order;
 *   - sums are evaluated in a different order than on the CPU, so the two agree except when a
 *     running sum lands within rounding of a threshold (sampling.h).
 */
#include "cuda/kernel_util.cuh"
#include "cuda/device_impl.h"
#include "cuda/kernels.h"

#include <float.h>
#include <math.h>

namespace
{

constexpr int kThreads = 512;
constexpr int kStatThreads = 256;

/* One chunk's statistics of a row (sample_stats_kernel): the sanitised maximum, the arg-max key
 * of the sanitised logits, and sum exp(l - max) over the chunk. */
struct part_stats {
    unsigned long long key;
    double sum;
    float max;
    int pad;
};

__device__ __forceinline__ float sanitize(float v)
{
    return v <= FLT_MAX ? v : (v == INFINITY ? FLT_MAX : -INFINITY);
}

/* exp(x) for x <= 0 as the CPU sampler's exp_neg: 0 below -708 (and for -inf). */
__device__ __forceinline__ double exp_cut(double x)
{
    return x < -708.0 ? 0.0 : exp(x);
}

__device__ __forceinline__ uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* pllm_rng_uniform (sampling.h). */
__device__ __forceinline__ double rng_uniform(uint64_t seed, uint64_t step)
{
    const uint64_t key = mix64(seed ^ 0x243F6A8885A308D3ull);
    const uint64_t x = mix64(key + (step + 1) * 0x9E3779B97F4A7C15ull);
    return (double)(x >> 11) * 0x1.0p-53;
}

__device__ __forceinline__ float key_float(uint32_t k)
{
    return __uint_as_float((k & 0x80000000u) ? (k ^ 0x80000000u) : ~k);
}

/* Arg-max key: larger value first, then lower id. */
__device__ __forceinline__ unsigned long long argmax_key(float v, int i)
{
    return ((unsigned long long)pllm_cuda::float_key(v) << 32) | (uint32_t) ~(uint32_t)i;
}
__device__ __forceinline__ int argmax_id(unsigned long long k)
{
    return (int)~(uint32_t)k;
}

/* The block's shared scratch. */
struct scratch {
    float *f;              /* [32] */
    double *d;             /* [32] */
    unsigned long long *u; /* [32] */
    int *i;                /* [32] */
    double *hist;          /* [256] */
    int *sel;              /* [1] */
    double *before;        /* [1] */
};

/*
 * Radix select over 32-bit keys, largest first: the key K at which the running weight (keys in
 * decreasing order, weight(i) for each included i) first reaches target; *s_gt gets the weight
 * of the keys above K. False when the whole included weight stays below target. Every thread
 * calls it; 4 passes of 8 bits, 3 barriers each.
 */
template <typename Incl, typename Key, typename Weight>
__device__ bool radix_select(int n, Incl incl, Key key, Weight weight, double target,
                             const scratch &sh, uint32_t *k_out, double *s_gt)
{
    const int tid = threadIdx.x;
    uint32_t prefix = 0, mask = 0;
    double before = 0.0;
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int b = tid; b < 256; b += kThreads) sh.hist[b] = 0.0;
        __syncthreads();
        for (int i = tid; i < n; i += kThreads) {
            if (!incl(i)) continue;
            const uint32_t k = key(i);
            if ((k & mask) != prefix) continue;
            atomicAdd(&sh.hist[(k >> shift) & 255u], weight(i));
        }
        __syncthreads();
        if (tid == 0) {
            int sel = -1;
            double acc = before;
            for (int b = 255; b >= 0; b--) {
                const double h = sh.hist[b];
                if (h > 0.0 && acc + h >= target) {
                    sel = b;
                    break;
                }
                acc += h;
            }
            *sh.sel = sel;
            *sh.before = acc;
        }
        __syncthreads();
        const int sel = *sh.sel;
        if (sel < 0) return false;
        before = *sh.before;
        prefix |= (uint32_t)sel << shift;
        mask |= 0xffu << shift;
    }
    *k_out = prefix;
    *s_gt = before;
    return true;
}

/* Exclusive prefix sum of v over the block (thread order); *total gets the sum. */
__device__ double block_exclusive_scan(double v, double *sd, double *total)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
    double x = v;
    for (int o = 1; o < 32; o <<= 1) {
        const double y = __shfl_up_sync(0xffffffffu, x, o);
        if (lane >= o) x += y;
    }
    double ex = __shfl_up_sync(0xffffffffu, x, 1);
    if (lane == 0) ex = 0.0;
    __syncthreads();
    if (lane == 31) sd[warp] = x;
    __syncthreads();
    double before = 0.0, all = 0.0;
    for (int w = 0; w < n_warps; w++) {
        if (w < warp) before += sd[w];
        all += sd[w];
    }
    *total = all;
    return before + ex;
}

/*
 * The random path (sampling.h step 5) over the processed logits lg [V]: returns the token, or
 * -1 when no logit is finite. lmax: the largest processed logit.
 */
__device__ int sample_random(const float *lg, int V, const pllm_cuda_sample_params &P, float lmax,
                             const scratch &sh)
{
    const int tid = threadIdx.x;
    if (lmax == -INFINITY) return -1;
    const double m = lmax, temp = P.temperature;

    /* top_k: the k-th largest processed logit (duplicates counted) */
    bool use_k = P.top_k > 0 && P.top_k < V;
    uint32_t k_key = 0;
    if (use_k) {
        double unused;
        use_k = radix_select(
            V, [](int) { return true; }, [&](int i) { return pllm_cuda::float_key(lg[i]); },
            [](int) { return 1.0; }, (double)P.top_k, sh, &k_key, &unused);
    }
    const double min_p = P.min_p;
    auto weight = [&](int i) -> double {
        const float v = lg[i];
        if (v == -INFINITY) return 0.0;
        if (use_k && pllm_cuda::float_key(v) < k_key) return 0.0;
        const double w = exp_cut(((double)v - m) / temp);
        return min_p > 0.0 && !(w >= min_p) ? 0.0 : w;
    };

    /* top_p: the cut logit, and how many of the ids tied with it stay */
    bool use_p = P.top_p < 1.0f;
    uint32_t p_key = 0;
    int id_cut = V; /* ties at p_key with id <= id_cut are kept */
    if (use_p) {
        double tot = 0.0;
        for (int i = tid; i < V; i += kThreads) tot += weight(i);
        tot = pllm_cuda::block_reduce(tot, sh.d, 0.0, pllm_cuda::warp_sum_op());
        const double target = (double)P.top_p * tot;
        double s_gt = 0.0;
        use_p = radix_select(
            V, [&](int i) { return weight(i) > 0.0; },
            [&](int i) { return pllm_cuda::float_key(lg[i]); }, weight, target, sh, &p_key, &s_gt);
        if (use_p) {
            int n_ties = 0;
            for (int i = tid; i < V; i += kThreads)
                n_ties += pllm_cuda::float_key(lg[i]) == p_key && weight(i) > 0.0;
            n_ties = pllm_cuda::block_reduce(n_ties, sh.i, 0, pllm_cuda::warp_sum_op());
            /* the CPU's running sum over the ties, in rank order */
            const double w_tie = exp_cut(((double)key_float(p_key) - m) / temp);
            int c = 0;
            double acc = s_gt;
            while (c < n_ties && acc < target) c++, acc += w_tie;
            if (c < n_ties) {
                uint32_t k2;
                double unused;
                if (radix_select(
                        V,
                        [&](int i) {
                            return pllm_cuda::float_key(lg[i]) == p_key && weight(i) > 0.0;
                        },
                        [](int i) { return ~(uint32_t)i; }, [](int) { return 1.0; }, (double)c, sh,
                        &k2, &unused))
                    id_cut = (int)~k2;
            }
        }
    }
    auto kept = [&](int i) -> double {
        const double w = weight(i);
        if (w == 0.0 || !use_p) return w;
        const uint32_t k = pllm_cuda::float_key(lg[i]);
        return k > p_key || (k == p_key && i <= id_cut) ? w : 0.0;
    };

    /* draw: contiguous id ranges per thread, a block scan, the crossing range walked in order */
    const int chunk = (V + kThreads - 1) / kThreads;
    const int i0 = min(V, tid * chunk), i1 = min(V, i0 + chunk);
    double local = 0.0;
    int last_pos = -1;
    for (int i = i0; i < i1; i++) {
        const double w = kept(i);
        local += w;
        if (w > 0.0) last_pos = i;
    }
    double total;
    const double excl = block_exclusive_scan(local, sh.d, &total);
    const double target = rng_uniform(P.seed, P.step) * total;
    if (tid == 0) *sh.sel = V;
    __syncthreads();
    if (excl <= target && local > 0.0) {
        double acc = excl;
        for (int i = i0; i < i1; i++) {
            acc += kept(i);
            if (acc > target) {
                atomicMin(sh.sel, i);
                break;
            }
        }
    }
    __syncthreads();
    int token = *sh.sel;
    if (token == V) /* only by rounding: the last kept id with weight > 0 */
        token = pllm_cuda::block_reduce(last_pos, sh.i, -1, pllm_cuda::warp_max_op());
    return token;
}

/*
 * sample_stats_kernel
 *   logits [n_samples][V] F32 (read only); params [n_samples] (n_valid); part
 *   [n_samples][n_parts] out.
 * Launch: grid (n_samples, n_parts), 256 threads; block (s, p) takes the p-th of n_parts equal
 *   contiguous chunks of row s's first n_valid logits: one pass for the sanitised max and the
 *   arg-max key (larger value, then lower id), a second over the same chunk (L1/L2-resident, 16
 *   KiB at V = 128k, 32 parts) for sum exp(l - max): exp in float (each term within an ulp of
 *   float; the logprobs it feeds are floats), summed in double.
 * Shared memory: 0.5 KiB (reduction scratch).
 * Per row: reads 4 V bytes once from memory; n_parts x 24 bytes written. With the rows spread
 *   over ~4 blocks an SM (pllm_cuda_sample_parts) the pass runs at the device's bandwidth: 64 rows
 *   x 128k = 32 MiB, ~11 us at 3 TB/s.
 */
__global__ void __launch_bounds__(kStatThreads) sample_stats_kernel(pllm_cuda_sample_args a)
{
    PLLM_SHARED(float, sh_f, 32);
    PLLM_SHARED(double, sh_d, 32);
    PLLM_SHARED(unsigned long long, sh_u, 32);
    float *const pf = sh_f;
    double *const pd = sh_d;
    unsigned long long *const pu = sh_u;
    const int s = blockIdx.x, p = blockIdx.y, tid = threadIdx.x;
    const pllm_cuda_sample_params &P = a.params[s];
    const int V = P.n_valid > 0 && P.n_valid < a.n_vocab ? P.n_valid : a.n_vocab;
    const int chunk = (V + a.n_parts - 1) / a.n_parts;
    const int i0 = min(V, p * chunk), i1 = min(V, i0 + chunk);
    const float *raw = a.logits + (int64_t)s * a.n_vocab;
    float mx = -INFINITY;
    unsigned long long best = 0;
    for (int i = i0 + tid; i < i1; i += kStatThreads) {
        const float v = sanitize(raw[i]);
        mx = fmaxf(mx, v);
        const unsigned long long k = argmax_key(v, i);
        best = k > best ? k : best;
    }
    mx = pllm_cuda::block_reduce(mx, pf, -INFINITY, pllm_cuda::warp_max_op());
    best = pllm_cuda::block_reduce(best, pu, 0ull, pllm_cuda::warp_max_op());
    double se = 0.0;
    if (mx > -INFINITY)
        for (int i = i0 + tid; i < i1; i += kStatThreads) {
            const float d = sanitize(raw[i]) - mx;
            se += d < -708.0f ? 0.0 : (double)expf(d);
        }
    se = pllm_cuda::block_reduce(se, pd, 0.0, pllm_cuda::warp_sum_op());
    if (tid == 0) {
        part_stats *o = static_cast<part_stats *>(a.part) + (int64_t)s * a.n_parts + p;
        o->key = best;
        o->sum = se;
        o->max = mx;
        o->pad = 0;
    }
}

/*
 * sample_kernel
 *   (V: n_vocab, the row stride; a sample reads only its first params[s].n_valid logits)
 *   logits [n_samples][V] F32 (read only); work [n_samples][V] F32 scratch; counts
 *   [n_samples][V] int32 (zero on entry and exit); params [n_samples]; ids: packed id lists
 *   tokens, logprobs [n_samples]; top [n_samples] (n_top entries each)
 * Launch: one block of 512 threads per sample (grid.x = n_samples); every pass strides the
 *   vocabulary (thread t: ids t, t + 512, ...), except the draw, where thread t owns the
 *   contiguous ids [t c, (t + 1) c), c = ceil(V / 512).
 * Shared memory: 2.8 KiB static (reduction scratch, one 256-bin double histogram).
 * Preconditions: params validated (pllm_sampling_validate) and packed by pllm_cuda_sample_fill;
 *   ids in [0, V) (the kernel skips others); counts all zero; top non-NULL when some n_top > 0.
 * Per sample: the raw max, arg-max and normaliser come from sample_stats_kernel's chunks (n_parts
 *   records). Plain greedy (no bans, penalties or top logprobs) then reads no logit row at all
 *   (one logit for its logprob); otherwise the row is sanitised into work (8 V bytes), each top
 *   logprob adds a 4 V-byte pass, greedy with bans or penalties an arg-max pass, random sampling
 *   ~8 passes (up to 12 with top-k and top-p) with a double exp per element and pass. Latency
 *   bound for small batches (one block per sample), bandwidth bound for large ones.
 */
__global__ void __launch_bounds__(kThreads, 1) sample_kernel(pllm_cuda_sample_args a)
{
    PLLM_SHARED(float, sh_f, 32);
    PLLM_SHARED(double, sh_d, 32);
    PLLM_SHARED(unsigned long long, sh_u, 32);
    PLLM_SHARED(int, sh_i, 32);
    PLLM_SHARED(double, sh_hist, 256);
    PLLM_SHARED_VAR(int, sh_sel);
    PLLM_SHARED_VAR(double, sh_before);
    const scratch sh = {sh_f, sh_d, sh_u, sh_i, sh_hist, &sh_sel, &sh_before};

    const int s = blockIdx.x, tid = threadIdx.x;
    const pllm_cuda_sample_params P = a.params[s];
    /* rows are n_vocab apart; the sample's vocabulary is the first n_valid of its row */
    const int V = P.n_valid > 0 && P.n_valid < a.n_vocab ? P.n_valid : a.n_vocab;
    const float *raw = a.logits + (int64_t)s * a.n_vocab;
    float *lg = a.work + (int64_t)s * a.n_vocab;
    int32_t *cnt = a.counts + (int64_t)s * a.n_vocab;

    /* the raw max, arg-max and log-softmax normaliser from the chunks' statistics */
    const part_stats *ps = static_cast<const part_stats *>(a.part) + (int64_t)s * a.n_parts;
    float mx = -INFINITY;
    unsigned long long rbest = 0;
    if (tid < a.n_parts) mx = ps[tid].max, rbest = ps[tid].key;
    const float rmax = pllm_cuda::block_reduce(mx, sh.f, -INFINITY, pllm_cuda::warp_max_op());
    rbest = pllm_cuda::block_reduce(rbest, sh.u, 0ull, pllm_cuda::warp_max_op());
    double lse = -INFINITY;
    if (rmax > -INFINITY) {
        double se = 0.0;
        if (tid < a.n_parts && ps[tid].max > -INFINITY)
            se = ps[tid].sum * exp((double)ps[tid].max - (double)rmax);
        se = pllm_cuda::block_reduce(se, sh.d, 0.0, pllm_cuda::warp_sum_op());
        lse = (double)rmax + log(se);
    }

    /* greedy with nothing that changes the logits and no list wanted: the raw arg-max */
    if ((P.temperature == 0.0f || P.top_k == 1) && P.n_banned == 0 && P.n_top == 0 &&
        !(P.flags & (PLLM_CUDA_SAMPLE_REP | PLLM_CUDA_SAMPLE_FREQ)) && rmax > -INFINITY) {
        if (tid == 0) {
            const int token = argmax_id(rbest);
            a.tokens[s] = token;
            a.logprobs[s] = (float)((double)sanitize(raw[token]) - lse);
        }
        return;
    }

    for (int i = tid; i < V; i += kThreads) lg[i] = sanitize(raw[i]);
    __syncthreads();

    /* top-N raw logprobs */
    const int n_top = min(P.n_top, V);
    unsigned long long prev = ~0ull;
    for (int k = 0; k < n_top; k++) {
        unsigned long long best = 0;
        for (int i = tid; i < V; i += kThreads) {
            const unsigned long long key = argmax_key(lg[i], i);
            if (key < prev && key > best) best = key;
        }
        best = pllm_cuda::block_reduce(best, sh.u, 0ull, pllm_cuda::warp_max_op());
        prev = best;
        if (tid == 0) { /* the value from the key: lg[] may already be changing (bans) */
            const double v = key_float((uint32_t)(best >> 32));
            a.top[s].ids[k] = argmax_id(best);
            a.top[s].logprobs[k] = rmax > -INFINITY ? (float)(v - lse) : -INFINITY;
        }
    }

    /* 1. bans */
    const int32_t *banned = a.ids + P.banned_off;
    for (int j = tid; j < P.n_banned; j += kThreads) {
        const int id = banned[j];
        if (id >= 0 && id < V) lg[id] = -INFINITY;
    }
    __syncthreads();
    /* 2. repetition penalty, once per distinct id of prompt and output */
    if (P.flags & PLLM_CUDA_SAMPLE_REP) {
        const int n_list = P.n_prompt + P.n_output;
        const float r = P.repetition_penalty;
        for (int j = tid; j < n_list; j += kThreads) {
            const int id =
                j < P.n_prompt ? a.ids[P.prompt_off + j] : a.ids[P.output_off + j - P.n_prompt];
            if (id < 0 || id >= V || atomicExch(&cnt[id], 1) != 0) continue;
            float v = lg[id];
            v = v > 0.0f ? __fdiv_rn(v, r) : __fmul_rn(v, r);
            lg[id] = v > FLT_MAX ? FLT_MAX : v;
        }
        __syncthreads();
        for (int j = tid; j < n_list; j += kThreads) {
            const int id =
                j < P.n_prompt ? a.ids[P.prompt_off + j] : a.ids[P.output_off + j - P.n_prompt];
            if (id >= 0 && id < V) cnt[id] = 0;
        }
        __syncthreads();
    }
    /* 3. frequency and presence penalties over the output ids */
    if (P.flags & PLLM_CUDA_SAMPLE_FREQ) {
        const int32_t *out = a.ids + P.output_off;
        for (int j = tid; j < P.n_output; j += kThreads)
            if (out[j] >= 0 && out[j] < V) atomicAdd(&cnt[out[j]], 1);
        __syncthreads();
        for (int j = tid; j < P.n_output; j += kThreads) {
            const int id = out[j];
            if (id < 0 || id >= V) continue;
            const int c = atomicExch(&cnt[id], 0);
            if (!c) continue;
            const float v = __fsub_rn(
                lg[id], __fadd_rn(__fmul_rn(P.frequency_penalty, (float)c), P.presence_penalty));
            lg[id] = v > FLT_MAX ? FLT_MAX : v;
        }
        __syncthreads();
    }

    /* 4-5. greedy or random */
    unsigned long long best = 0;
    for (int i = tid; i < V; i += kThreads) {
        const unsigned long long key = argmax_key(lg[i], i);
        best = key > best ? key : best;
    }
    best = pllm_cuda::block_reduce(best, sh.u, 0ull, pllm_cuda::warp_max_op());
    const int best_id = argmax_id(best);
    const float lmax = lg[best_id];
    int token;
    if (P.temperature == 0.0f || P.top_k == 1)
        token = lmax > -INFINITY ? best_id : -1;
    else
        token = sample_random(lg, V, P, lmax, sh);

    if (tid == 0) {
        if (token < 0) { /* no finite logit: the lowest id that is not banned */
            token = 0;
            for (int t = 0; t < V; t++) {
                bool is_banned = false;
                for (int j = 0; j < P.n_banned && !is_banned; j++) is_banned = banned[j] == t;
                if (!is_banned) {
                    token = t;
                    break;
                }
            }
        }
        a.tokens[s] = token;
        a.logprobs[s] = rmax > -INFINITY ? (float)((double)sanitize(raw[token]) - lse) : -INFINITY;
    }
}

} /* namespace */

extern "C" size_t pllm_cuda_sample_part_bytes(int32_t n_samples, int32_t n_parts)
{
    return sizeof(part_stats) * (size_t)(n_samples > 0 ? n_samples : 0) *
           (size_t)(n_parts > 0 ? n_parts : 0);
}

extern "C" int32_t pllm_cuda_sample_parts(int32_t n_samples, int32_t n_vocab, int32_t n_sm)
{
    if (n_samples < 1) return 1;
    int64_t p = ((int64_t)4 * (n_sm > 0 ? n_sm : 1) + n_samples - 1) / n_samples;
    p = p < (n_vocab + 4095) / 4096 ? p : (n_vocab + 4095) / 4096;
    return (int32_t)(p < 1 ? 1 : p > PLLM_CUDA_SAMPLE_MAX_PARTS ? PLLM_CUDA_SAMPLE_MAX_PARTS : p);
}

extern "C" pllm_status pllm_cuda_sample(pllm_cuda_dev *dev, const pllm_cuda_sample_args *a)
{
    if (a->n_samples < 0 || a->n_vocab < 1 || a->n_parts < 1 ||
        a->n_parts > PLLM_CUDA_SAMPLE_MAX_PARTS || (a->n_samples > 0 && !a->part))
        return pllm_errorf(PLLM_ERR_INVALID,
                           "sample: bad shape n_samples=%d n_vocab=%d n_parts=%d (1..%d, part %s)",
                           a->n_samples, a->n_vocab, a->n_parts, PLLM_CUDA_SAMPLE_MAX_PARTS,
                           a->part ? "given" : "NULL");
    if (a->n_samples == 0) return PLLM_OK;
    PLLM_LAUNCH(sample_stats_kernel, dim3((unsigned)a->n_samples, (unsigned)a->n_parts),
                dim3(kStatThreads), 0, pllm_cuda_dev_stream(dev))
    (*a);
    pllm_status st = PLLM_CUDA_LAUNCHED("sample_stats_kernel");
    if (st != PLLM_OK) return st;
    PLLM_LAUNCH(sample_kernel, dim3((unsigned)a->n_samples), dim3(kThreads), 0,
                pllm_cuda_dev_stream(dev))
    (*a);
    return PLLM_CUDA_LAUNCHED("sample_kernel");
}
