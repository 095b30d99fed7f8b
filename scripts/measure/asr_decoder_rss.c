#include <pocketsphinx.h>
#include <sphinxbase/err.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
static long rss_kb(void) { FILE *f = fopen("/proc/self/status", "r"); char l[256]; long v = 0;
  while (fgets(l, sizeof l, f)) if (!strncmp(l, "VmRSS:", 6)) sscanf(l + 6, "%ld", &v); fclose(f); return v; }
int main(int argc, char **argv) {
  const char *mm = argc > 1 ? argv[1] : "no"; int n = argc > 2 ? atoi(argv[2]) : 4;
  err_set_logfp(NULL);
  const char *m = "/usr/share/pocketsphinx/model/en-us/";
  long base = rss_kb(), prev = base;
  for (int i = 0; i < n; i++) {
    cmd_ln_t *cfg = cmd_ln_init(NULL, ps_args(), TRUE, "-hmm", "/usr/share/pocketsphinx/model/en-us/en-us",
      "-dict", "/usr/share/pocketsphinx/model/en-us/cmudict-en-us.dict", "-lm", "/usr/share/pocketsphinx/model/en-us/en-us.lm.bin",
      "-fwdflat", "no", "-bestpath", "no", "-mmap", mm, NULL);
    ps_decoder_t *ps = ps_init(cfg);
    if (!ps) { printf("init failed\n"); return 1; }
    // Decode a little so lazily touched pages count.
    short buf[16000] = {0}; ps_start_utt(ps); ps_process_raw(ps, buf, 16000, 0, 0); ps_end_utt(ps);
    long r = rss_kb(); printf("mmap=%s decoder %d: +%ld KiB (total %ld MiB)\n", mm, i + 1, r - prev, (r - base) / 1024); prev = r;
  }
  (void)m; return 0;
}
