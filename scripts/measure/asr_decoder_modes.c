// RSS per pocketsphinx decoder with and without the two savings internal/speech uses
// (issue 12, item 10). Build and run:
//   gcc -O2 -o /tmp/asr_modes scripts/measure/asr_decoder_modes.c $(pkg-config --cflags --libs pocketsphinx sphinxbase)
//   for m in 0 1 2 3 10 11; do /tmp/asr_modes $m 5; done
// mode bits: 1 = dictionary restricted to the LM's words (written to /tmp/asr_modes.dict),
//            2 = LM loaded once, each decoder scoring through a shallow clone (as asrshare.c),
//            8 = with 2: no LM search at all (acoustic model + dictionary + triphone map only).
// Prints the first decoder's RSS and the mean RSS each further decoder adds (right after
// ps_init/ps_set_lm, before any audio). Sharing the dictionary and triphone map as well needs
// the decoder's internals: internal/speech's TestASRDecoderMemory measures the full thing.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pocketsphinx.h>
#include <sphinxbase/ngram_model.h>
#include <sphinxbase/ckd_alloc.h>
#include <sphinxbase/err.h>
#include <sphinxbase/hash_table.h>
#include <sphinxbase/logmath.h>

#define HMM "/usr/share/pocketsphinx/model/en-us/en-us"
#define DICT "/usr/share/pocketsphinx/model/en-us/cmudict-en-us.dict"
#define LM "/usr/share/pocketsphinx/model/en-us/en-us.lm.bin"
#define RDICT "/tmp/asr_modes.dict"

// Mirrors of sphinxbase 5prealpha's internal structs (see internal/speech/asrshare.c).
typedef struct {
	int refcount; uint32 *n_counts; int32 n_1g_alloc; int32 n_words;
	uint8 n, n_classes, writable, flags;
	logmath_t *lmath; float32 lw; int32 log_wip; int32 log_zero;
	char **word_str; hash_table_t *wid; int32 *tmp_wids; void **classes; void *funcs;
} model_t;
typedef struct {
	uint8 *ngram_mem; size_t ngram_mem_size; void *unigrams, *middle_begin, *middle_end, *longest, *quant;
	float backoff[5]; uint32 prev_hist[4];
} trie_t;
typedef struct { model_t base; trie_t *trie; } trie_model_t;

static ngram_model_t *clone_lm(ngram_model_t *m) {
	trie_model_t *src = (trie_model_t *)m, *c = ckd_calloc(1, sizeof(*c));
	*c = *src;
	c->trie = ckd_calloc(1, sizeof(trie_t));
	*c->trie = *src->trie;
	memset(c->trie->prev_hist, -1, sizeof(c->trie->prev_hist));
	memset(c->trie->backoff, 0, sizeof(c->trie->backoff));
	c->base.refcount = 2;
	c->base.tmp_wids = ckd_calloc(c->base.n, sizeof(int32));
	return (ngram_model_t *)c;
}

static long rss_kb(void) {
	FILE *f = fopen("/proc/self/status", "r"); char l[256]; long v = 0;
	while (fgets(l, sizeof l, f)) if (!strncmp(l, "VmRSS:", 6)) v = atol(l + 6);
	fclose(f); return v;
}

// write_restricted_dict keeps the entries of DICT whose word (without "(2)") the LM knows.
static void write_restricted_dict(void) {
	logmath_t *lmath = logmath_init(1.0001, 0, 0);
	ngram_model_t *lm = ngram_model_read(NULL, LM, NGRAM_AUTO, lmath);
	FILE *in = fopen(DICT, "r"), *out = fopen(RDICT, "w");
	char line[1024], word[512];
	int kept = 0;
	while (fgets(line, sizeof line, in)) {
		if (sscanf(line, "%511s", word) != 1) continue;
		char *p = strchr(word, '(');
		if (p != NULL && p != word) *p = '\0';
		if (ngram_wid(lm, word) != ngram_unknown_wid(lm)) { fputs(line, out); kept++; }
	}
	fclose(in); fclose(out);
	ngram_model_free(lm); logmath_free(lmath);
	fprintf(stderr, "restricted dictionary: %d entries in %s\n", kept, RDICT);
}

int main(int argc, char **argv) {
	int mode = argc > 1 ? atoi(argv[1]) : 0, n = argc > 2 ? atoi(argv[2]) : 5;
	if (n < 2 || n > 64) return 2;
	err_set_logfp(NULL);
	if (mode & 1) write_restricted_dict();
	const char *dict = (mode & 1) ? RDICT : DICT;
	long r0 = rss_kb(), r1 = 0;
	ngram_model_t *master = NULL;
	for (int i = 0; i < n; i++) {
		cmd_ln_t *cfg = (mode & 2)
			? cmd_ln_init(NULL, ps_args(), TRUE, "-hmm", HMM, "-dict", dict, "-fwdflat", "no", "-bestpath", "no", NULL)
			: cmd_ln_init(NULL, ps_args(), TRUE, "-hmm", HMM, "-dict", dict, "-lm", LM, "-fwdflat", "no", "-bestpath", "no", NULL);
		ps_decoder_t *ps = ps_init(cfg);
		cmd_ln_free_r(cfg);
		if (ps == NULL) { fprintf(stderr, "ps_init failed\n"); return 1; }
		if ((mode & 2) && !(mode & 8)) {
			if (master == NULL) master = ngram_model_read(ps_get_config(ps), LM, NGRAM_AUTO, ps_get_logmath(ps));
			if (ps_set_lm(ps, "lm", clone_lm(master)) < 0 || ps_set_search(ps, "lm") < 0) { fprintf(stderr, "ps_set_lm failed\n"); return 1; }
		}
		if (i == 0) r1 = rss_kb();
	}
	long r2 = rss_kb();
	printf("mode %d: first decoder %.1f MiB, each further decoder %.1f MiB (mean of %d)\n",
	       mode, (r1 - r0) / 1024.0, (r2 - r1) / 1024.0 / (n - 1), n - 1);
	return 0;
}
