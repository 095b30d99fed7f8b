#include <speex/speex_resampler.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
// Same measurement as TestResamplerAnyRateQuality: 0.5-peak 1 kHz sine, 0.5 s, 20 ms chunks,
// max error vs the analytic sine at the output rate (after removing the resampler's delay),
// 5 ms edges skipped; plus CPU time per second of audio.
static double run(int from, int to, int q, double *rtf) {
  int err; SpeexResamplerState *st = speex_resampler_init(1, from, to, q, &err);
  int n = from / 2; float *in = malloc(sizeof(float) * n); float *out = malloc(sizeof(float) * (n * 8 + 100));
  for (int i = 0; i < n; i++) in[i] = 0.5 * sin(2 * M_PI * 1000.0 * i / from);
  int per = from / 50, got = 0;
  clock_t t0 = clock();
  for (int reps = 0; reps < 20; reps++) {
    speex_resampler_reset_mem(st); got = 0;
    for (int off = 0; off < n; off += per) {
      spx_uint32_t il = (off + per <= n ? per : n - off), ol = n * 8 + 100 - got;
      speex_resampler_process_float(st, 0, in + off, &il, out + got, &ol); got += ol;
    }
  }
  *rtf = (double)(clock() - t0) / CLOCKS_PER_SEC / 20 / 0.5;
  int lat = speex_resampler_get_output_latency(st);
  // Least-squares fit of a 1 kHz sine (any phase: speexdsp's delay is fractional), then the
  // largest residual: distortion and noise, not alignment.
  double ss=0, sc=0, cc=0, ys=0, yc=0; int edge = to / 200;
  for (int i = edge + lat; i < got - edge; i++) { double s_ = sin(2*M_PI*1000.0*i/to), c_ = cos(2*M_PI*1000.0*i/to);
    ss += s_*s_; sc += s_*c_; cc += c_*c_; ys += out[i]*s_; yc += out[i]*c_; }
  double det = ss*cc - sc*sc, a = (ys*cc - yc*sc)/det, b = (yc*ss - ys*sc)/det;
  double worst = 0;
  for (int i = edge + lat; i < got - edge; i++) { double e = fabs(out[i] - a*sin(2*M_PI*1000.0*i/to) - b*cos(2*M_PI*1000.0*i/to)); if (e > worst) worst = e; }
  fprintf(stderr, "  amplitude %.5f\n", sqrt(a*a+b*b));
  speex_resampler_destroy(st); free(in); free(out); return worst;
}
int main() {
  int pairs[][2] = {{8000,16000},{11025,16000},{22050,16000},{24000,16000},{44100,16000},{48000,16000},{24000,8000}};
  for (int q = 3; q <= 10; q += 7) for (int i = 0; i < 7; i++) { double rtf; double e = run(pairs[i][0], pairs[i][1], q, &rtf);
    printf("speexdsp q=%d %5d->%5d max_err %.2e rtf %.5f\n", q, pairs[i][0], pairs[i][1], e, rtf); }
}
