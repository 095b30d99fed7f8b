#include <pocketsphinx.h>
#include <sphinxbase/err.h>
#include <sphinxbase/ngram_model.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
static long rss_kb(void) { FILE *f = fopen("/proc/self/status", "r"); char l[256]; long v = 0;
  while (fgets(l, sizeof l, f)) if (!strncmp(l, "VmRSS:", 6)) sscanf(l + 6, "%ld", &v); fclose(f); return v; }
int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 4;
  err_set_logfp(NULL);
  long base = rss_kb();
  cmd_ln_t *c0 = cmd_ln_init(NULL, ps_args(), TRUE, "-hmm", "/usr/share/pocketsphinx/model/en-us/en-us", NULL);
  logmath_t *lmath = logmath_init(1.0001, 0, 0);
  ngram_model_t *lm = ngram_model_read(c0, "/usr/share/pocketsphinx/model/en-us/en-us.lm.bin", NGRAM_AUTO, lmath);
  long r = rss_kb(); printf("shared LM alone: %ld MiB\n", (r - base) / 1024); long prev = r;
  for (int i = 0; i < n; i++) {
    cmd_ln_t *cfg = cmd_ln_init(NULL, ps_args(), TRUE, "-hmm", "/usr/share/pocketsphinx/model/en-us/en-us",
      "-dict", "/usr/share/pocketsphinx/model/en-us/cmudict-en-us.dict", "-fwdflat", "no", "-bestpath", "no", NULL);
    ps_decoder_t *ps = ps_init(cfg);
    if (!ps) { printf("init failed\n"); return 1; }
    long a = rss_kb();
    if (ps_set_lm(ps, "shared", lm) < 0 || ps_set_search(ps, "shared") < 0) { printf("set lm failed\n"); return 1; }
    short buf[16000] = {0}; ps_start_utt(ps); ps_process_raw(ps, buf, 16000, 0, 0); ps_end_utt(ps);
    long b = rss_kb(); printf("decoder %d: init (AM+dict) +%ld KiB, search on shared LM +%ld KiB\n", i + 1, a - prev, b - a); prev = b;
  }
  return 0;
}
