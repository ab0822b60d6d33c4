// A 2-d convolution's window over one NCHW plane, and the two ways the
// kernels read a tap as one contiguous run: the "phase planes" for any
// stride and dilation (the depthwise, grouped and strided kernels), and,
// for unit-stride 'same' layers, the plane itself under lane masks.
//
// Phase plane (pr, pc) of a zero-padded plane holds its elements
// (i * sh + pr, j * sw + pc) at Q[i * L + j]. Output position (oi, oj)
// under tap (ki, kj) reads phase ((ki*dh) % sh, (kj*dw) % sw) at
// (oi + (ki*dh) / sh) * L + oj + (kj*dw) / sw: over the "extended"
// positions q = oi * L + oj (the columns past ow computed and dropped)
// each tap is one shifted run, with no padding test.
#pragma once

#include <cstdint>
#include <vector>

namespace kiln::runtime {

struct ConvWindow {
  int64_t H = 1, W = 1;  // the input plane
  int64_t kh = 1, kw = 1, sh = 1, sw = 1, dh = 1, dw = 1;
  int64_t ph = 0, pw = 0;  // padding before the first row / column (the far side follows from oh, ow)
  int64_t oh = 1, ow = 1;
};

// Extended positions are computed in blocks of this many (4 zmm of
// float32); the phase planes carry that much slack so a block never reads
// past them.
constexpr int64_t kPhaseBlock = 64;

// The layout of one input plane's phase planes and the taps over them.
struct PhaseLayout {
  int64_t L = 0;       // row length of a phase plane (ow + the widest tap's column offset)
  int64_t rows = 0;    // rows of a phase plane that hold data (oh + the tallest tap's row offset)
  int64_t E = 0;       // extended positions: oh * L
  int64_t Epad = 0;    // E rounded up to kPhaseBlock
  int64_t S = 0;       // elements per phase plane (rows * L plus the slack a block reads)
  int64_t phases = 1;  // sh * sw: one plane's phase planes take phases * S elements
  std::vector<int64_t> tap;  // element offset of tap t (row-major over the window) from the phase planes' start
};

PhaseLayout phase_layout(const ConvWindow& s);

// Writes `plane`'s ([H][W]) phase planes to q (phases * S elements), 0 on
// padding and in the slack; each element written once.
void fill_phases(const ConvWindow& s, const PhaseLayout& l, const float* plane, float* q);
void fill_phases(const ConvWindow& s, const PhaseLayout& l, const double* plane, double* q);

// A unit-stride layer whose output is as large as its input ('same'):
// output position q = oi * W + oj reads the plane at q + offset[t] under
// tap t, one shifted run of the plane itself, and mask[block * taps + t]
// has the lanes of that block of 16 positions whose element exists (not
// padding, not wrapped into the next or previous row). One table serves
// every plane; a masked-off lane is never read, so a run may start before
// its plane or end after it.
struct SameTaps {
  int64_t blocks = 0;           // ceil(H * W / 16)
  std::vector<uint16_t> mask;   // [blocks][taps]
  std::vector<int64_t> offset;  // [taps]
};

// Requires sh == sw == 1, oh == H, ow == W.
SameTaps same_taps(const ConvWindow& s);

}  // namespace kiln::runtime
