// The order in which the chunk-parallel kernels hand out (chunk, head) work: in rounds, chunk r of
// every sequence before any chunk r + 1. A chunk's neighbour in its chain (r - 1 in the forward,
// its successor in the backward, which counts rounds from the end) therefore always has an
// earlier ticket, so it started first and waiting on it cannot deadlock.
//
// Plain C++ on the host as well, so that the mapping is unit-tested without a GPU.
#pragma once

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define M3_HD __host__ __device__ __forceinline__
#else
#define M3_HD inline
#endif

// Chunks of sequence i, for chunks of `chunk` tokens.
M3_HD int m3_seq_chunks(const int* cu_seqlens, int i, int chunk) {
  return (cu_seqlens[i + 1] - cu_seqlens[i] + chunk - 1) / chunk;
}

// The chunk of a sequence of `len` tokens that the backward's round `round` takes: the backward
// walks each sequence's chunks from the last.
M3_HD int m3_backward_chunk(int len, int chunk, int round) { return (len + chunk - 1) / chunk - 1 - round; }

// The pairs can also go with every sequence's last round aligned (M3_CP_ALIGNED_ENDS, v231): pair
// (sequence i, round r) takes the aligned round r + most - chunks_i, where `most` is the longest
// sequence's chunk count, and pairs go by aligned round, sequences in order within one. The longest
// chains thus start first and all chains end together, where round order started every chain
// at once and left the longest sequence's last rounds to run alone at the end (a few jobs on an
// idle device). Within a chain rounds still go up, so its neighbour keeps the earlier ticket.
// Round order is the same walk with every sequence's offset zero.
M3_HD int m3_round_offset(int chunks, int most, bool aligned) { return aligned ? most - chunks : 0; }

// Pairs whose (aligned) round is below a: sum over sequences of min(chunks, max(0, a - offset)).
M3_HD long long m3_pairs_before(const int* cu_seqlens, int num_seqs, int chunk, int most, int a, bool aligned) {
  long long n = 0;
  for (int i = 0; i < num_seqs; ++i) {
    const int c = m3_seq_chunks(cu_seqlens, i, chunk), behind = a - m3_round_offset(c, most, aligned);
    n += behind <= 0 ? 0 : (behind < c ? behind : c);
  }
  return n;
}

// The q-th (sequence, round) pair in round order (`aligned` false) or in aligned-round order,
// sequences in order within a round; false past the last one. O(S log(longest)) work.
M3_HD bool m3_schedule_in(const int* cu_seqlens, int num_seqs, int chunk, long long q, bool aligned, int& seq,
                          int& round) {
  int most = 0;
  for (int i = 0; i < num_seqs; ++i) {
    const int c = m3_seq_chunks(cu_seqlens, i, chunk);
    most = c > most ? c : most;
  }
  if (q < 0 || q >= m3_pairs_before(cu_seqlens, num_seqs, chunk, most, most, aligned)) return false;
  int lo = 0, hi = most;  // before(lo) <= q < before(hi)
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (m3_pairs_before(cu_seqlens, num_seqs, chunk, most, mid, aligned) <= q) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  long long k = q - m3_pairs_before(cu_seqlens, num_seqs, chunk, most, lo, aligned);
  for (int i = 0; i < num_seqs; ++i) {
    const int c = m3_seq_chunks(cu_seqlens, i, chunk), offset = m3_round_offset(c, most, aligned);
    if (lo >= offset && lo - offset < c && k-- == 0) {
      seq = i;
      round = lo - offset;
      return true;
    }
  }
  return false;
}

M3_HD bool m3_schedule(const int* cu_seqlens, int num_seqs, int chunk, long long q, int& seq, int& round) {
  return m3_schedule_in(cu_seqlens, num_seqs, chunk, q, false, seq, round);
}
M3_HD bool m3_schedule_aligned(const int* cu_seqlens, int num_seqs, int chunk, long long q, int& seq, int& round) {
  return m3_schedule_in(cu_seqlens, num_seqs, chunk, q, true, seq, round);
}
