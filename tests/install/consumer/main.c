/* One forward through an installed libhfa, checked against the value worked out by hand:
 * one query row, two keys with scores 0 and ln 3 (scale 1), so the weights are 1/4 and 3/4,
 * out = v0/4 + 3·v1/4 and lse = ln(1 + 3). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "hfa/hfa.h"

enum { D = 64 };

static hfa_tensor tensor(float* data, int64_t rows) {
  hfa_tensor t = {data, HFA_F32, 4, {1, rows, 1, D}, {rows * D, D, D, 1}, HFA_CPU, 0};
  return t;
}

int main(void) {
  static float q[D], k[2 * D], v[2 * D], out[D];
  float lse_value = 0.0f;
  q[0] = 1.0f;
  k[D] = logf(3.0f);  /* key 1: score ln 3; key 0: score 0 */
  for (int i = 0; i < D; ++i) {
    v[i] = (float)i;
    v[D + i] = 100.0f + i;
  }
  hfa_tensor tq = tensor(q, 1), tk = tensor(k, 2), tv = tensor(v, 2), tout = tensor(out, 1);
  hfa_tensor lse = {&lse_value, HFA_F32, 3, {1, 1, 1}, {1, 1, 1}, HFA_CPU, 0};
  hfa_options options = hfa_default_options();
  options.has_softmax_scale = 1;
  options.softmax_scale = 1.0f;

  if (hfa_forward(&tq, &tk, &tv, &tout, &lse, &options) != HFA_SUCCESS) {
    fprintf(stderr, "hfa_forward: %s\n", hfa_last_error());
    return 1;
  }
  int bad = fabsf(lse_value - logf(4.0f)) > 1e-6f;
  for (int i = 0; i < D; ++i) {
    const float expected = 0.25f * v[i] + 0.75f * v[D + i];
    bad |= fabsf(out[i] - expected) > 1e-6f * expected;
  }
  printf("hfa %s: out[0] %.5f (expected 75), lse %.5f (expected ln 4 = %.5f): %s\n",
         hfa_version(), out[0], lse_value, logf(4.0f), bad ? "WRONG" : "ok");
  return bad;
}
