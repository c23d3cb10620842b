/* Log-linear histogram index: exact below 128 ns, then for a value whose top
 * bit is k (k >= 7) the bucket keeps the top 7 bits (a mantissa in [64,128))
 * and drops the k-6 bits below them.  A bucket is therefore 2^(k-6) wide and
 * starts at >= 64 * 2^(k-6): relative width <= 1/64.  k = 63 is the last
 * exponent, so all of uint64 is covered by HIST_BUCKETS buckets. */
#include "rtprobe.h"

unsigned hist_index(uint64_t v)
{
    if (v < 128)
        return (unsigned)v;
    unsigned k = 63u - (unsigned)__builtin_clzll(v);
    unsigned shift = k - 6u;
    return 128u + (shift - 1u) * 64u + (unsigned)((v >> shift) - 64u);
}

uint64_t hist_lo(unsigned idx)
{
    if (idx < 128)
        return idx;
    unsigned j = idx - 128u;
    unsigned shift = j / 64u + 1u;
    return (uint64_t)(64u + j % 64u) << shift;
}

uint64_t hist_hi(unsigned idx)
{
    if (idx < 128)
        return idx;
    unsigned shift = (idx - 128u) / 64u + 1u;
    return hist_lo(idx) + ((uint64_t)1 << shift) - 1u;
}
