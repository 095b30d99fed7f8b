// Sharing read-only model data between pocketsphinx decoders.
//
// Debian's pocketsphinx 0.8+5prealpha+1 (sphinxbase 5prealpha) builds every part of a decoder
// from files in ps_init: acoustic model, dictionary, triphone map, language model, search. Of
// the ~91 MiB one decoder costs, the trie LM is 33 MiB and the dictionary with its triphone map
// 15 MiB (with the LM's 79k-entry vocabulary; 23 MiB with all of cmudict). Both are only read
// while decoding, but the library has no public way to hand them to a second decoder, and the
// LM cannot simply be shared: lm_trie_score keeps a one-entry cache of the last history's
// backoff weights (lm_trie_t.backoff / prev_hist) inside the model, so two decoders scoring one
// model at the same time would read each other's cached backoffs.
//
// So each decoder gets
//   - a shallow clone of the LM: its own ngram_model_trie_t and lm_trie_t headers (and with them
//     its own backoff cache) over the one copy of the trie arrays, quantisation tables, word
//     strings and word hash, which nothing writes after loading (we never add words);
//   - the dictionary and triphone map of the first decoder, through their reference counts.
// That needs the layout of four internal structs, mirrored below from the sources of that
// version (sphinxbase src/libsphinxbase/lm/{ngram_model_internal.h,lm_trie.h,
// ngram_model_trie.h}, pocketsphinx src/libpocketsphinx/pocketsphinx_internal.h). Every mirrored
// field used is checked against the public accessors at run time (omni_asr_shared_new), and the
// LM clone must score exactly as the original before sharing is switched on; otherwise the pool
// falls back to decoders that own everything, as before.
//
// Reference counts in sphinxbase are plain ints: every call here runs under the pool's lock.
#include <stdlib.h>
#include <string.h>

#include <sphinxbase/ckd_alloc.h>
#include <sphinxbase/err.h>
#include <sphinxbase/cmd_ln.h>
#include <sphinxbase/hash_table.h>
#include <sphinxbase/logmath.h>

#include <sphinxbase/feat.h>
#include <sphinxbase/cmn.h>

#include "asrshare.h"

// Exported by libpocketsphinx, declared in its uninstalled dict.h / dict2pid.h.
typedef struct dict_s dict_t;
typedef struct dict2pid_s dict2pid_t;
dict_t *dict_retain(dict_t *d);
int dict_free(dict_t *d);
dict2pid_t *dict2pid_retain(dict2pid_t *d2p);
int dict2pid_free(dict2pid_t *d2p);

#define OMNI_NGRAM_MAX_ORDER 5 // sphinxbase ngram_model_internal.h

// struct ngram_model_s (ngram_model_internal.h).
typedef struct {
	int refcount;
	uint32 *n_counts;
	int32 n_1g_alloc;
	int32 n_words;
	uint8 n;
	uint8 n_classes;
	uint8 writable;
	uint8 flags;
	logmath_t *lmath;
	float32 lw;
	int32 log_wip;
	int32 log_zero;
	char **word_str;
	hash_table_t *wid;
	int32 *tmp_wids;
	void **classes;
	void *funcs;
} omni_ngram_model_t;

// struct lm_trie_s (lm_trie.h): the arrays are shared, backoff/prev_hist is the score cache.
typedef struct {
	uint8 *ngram_mem;
	size_t ngram_mem_size;
	void *unigrams;
	void *middle_begin;
	void *middle_end;
	void *longest;
	void *quant;
	float backoff[OMNI_NGRAM_MAX_ORDER];
	uint32 prev_hist[OMNI_NGRAM_MAX_ORDER - 1];
} omni_lm_trie_t;

// struct ngram_model_trie_s (ngram_model_trie.h).
typedef struct {
	omni_ngram_model_t base;
	omni_lm_trie_t *trie;
} omni_ngram_model_trie_t;

// The head of struct ps_decoder_s (pocketsphinx_internal.h).
typedef struct {
	cmd_ln_t *config;
	int refcount;
	void *acmod;
	dict_t *dict;
	dict2pid_t *d2p;
	logmath_t *lmath;
} omni_ps_head_t;

struct omni_asr_shared_s {
	ngram_model_t *lm; // the loaded model; clones point into it
	// lmath is the first decoder's logmath, which lm and its clones point to without holding
	// a reference (sphinxbase's ngram models never retain it): held here so that it outlives
	// the first decoder.
	logmath_t *lmath;
	dict_t *dict;
	dict2pid_t *d2p;
};

static const char *omni_search = "omni";

// omni_cfg: one decoder's configuration. ps_init writes expanded model paths into the config
// it is given, so each decoder gets its own. One forward pass only: the flat-lexicon rescoring
// and lattice best path cost about 15% more CPU per stream (asr_rtf 0.106 -> 0.089, one run
// each); goforward stays exact, the TTS round trip drops from 12/13 to 11/13 words.
// -maxhmmpf 3000 bounds the HMMs the search keeps active per frame (pocketsphinx's default,
// 30000, is ten times more): decoding speech is 92 % of a server's CPU with conversations
// running (docs/BENCHMARKS.md, "Conversations at once"), and the bound halves it with the
// same words: goforward, something and the five librivox clips of pocketsphinx-testdata gave
// identical transcripts (word errors 28/80 against the references both ways) in 5.3 against
// 10.1 s of decoder CPU. Tighter bounds lose words (1500 with -maxwpf 10: 30/80 in 3.4 s).
// -maxhmmpf 2000 with -maxwpf 5 (word exits per frame) narrow the search again: over
// goforward, something, numbers and the librivox clips the decoder CPU went from 5.1–5.6 to
// 3.7–3.9 s (three runs each) with the same words (28–29/75 errors). -ds 2 (the acoustic model
// scored on every other frame) would save another quarter, but it hears goforward through a
// WebRTC call's Opus as "go for words ten meters" (docs/BENCHMARKS.md).
static cmd_ln_t *omni_cfg(const char *hmm, const char *dict, const char *lm) {
	if (dict != NULL && lm != NULL)
		return cmd_ln_init(NULL, ps_args(), TRUE, "-hmm", hmm, "-dict", dict, "-lm", lm,
		                   "-fwdflat", "no", "-bestpath", "no", "-maxhmmpf", "2000", "-maxwpf", "5", NULL);
	if (dict != NULL)
		return cmd_ln_init(NULL, ps_args(), TRUE, "-hmm", hmm, "-dict", dict,
		                   "-fwdflat", "no", "-bestpath", "no", "-maxhmmpf", "2000", "-maxwpf", "5", NULL);
	// No -dict: dict_init then holds only the fillers and sentence markers.
	return cmd_ln_init(NULL, ps_args(), TRUE, "-hmm", hmm, "-fwdflat", "no", "-bestpath", "no", "-maxhmmpf", "2000", "-maxwpf", "5", NULL);
}

static ps_decoder_t *omni_init(const char *hmm, const char *dict, const char *lm) {
	// Logging is process-global in sphinxbase and goes to stderr by default; omniserve
	// reports ASR failures through Go errors instead.
	err_set_logfp(NULL);
	cmd_ln_t *cfg = omni_cfg(hmm, dict, lm);
	if (cfg == NULL)
		return NULL;
	ps_decoder_t *ps = ps_init(cfg);
	cmd_ln_free_r(cfg); // ps_init holds its own reference
	return ps;
}

static int omni_ps_head_ok(ps_decoder_t *ps) {
	omni_ps_head_t *h = (omni_ps_head_t *)ps;
	return h->config == ps_get_config(ps) && h->lmath == ps_get_logmath(ps) && h->refcount == 1 &&
	       h->acmod != NULL && h->dict != NULL && h->d2p != NULL;
}

static int omni_lm_ok(ngram_model_t *lm, logmath_t *lmath) {
	omni_ngram_model_trie_t *m = (omni_ngram_model_trie_t *)lm;
	int n = ngram_model_get_size(lm);
	return m->base.refcount == 1 && m->base.n_counts == ngram_model_get_counts(lm) && m->base.n == n &&
	       n >= 2 && n <= OMNI_NGRAM_MAX_ORDER && m->base.lmath == lmath && m->base.n_classes == 0 &&
	       m->base.funcs != NULL && m->trie != NULL && m->trie->unigrams != NULL &&
	       m->trie->ngram_mem != NULL && m->trie->ngram_mem_size > 0;
}

// omni_lm_clone: a model that shares lm's data and has its own headers and score cache. It is
// born with two references, so that the library's last ngram_model_free (when the decoder's
// search goes) never reaches the free that would release the shared arrays; omni_lm_clone_free
// releases only what the clone owns.
static ngram_model_t *omni_lm_clone(ngram_model_t *lm) {
	omni_ngram_model_trie_t *src = (omni_ngram_model_trie_t *)lm;
	omni_ngram_model_trie_t *c = ckd_calloc(1, sizeof(*c));
	*c = *src;
	c->trie = ckd_calloc(1, sizeof(*c->trie));
	*c->trie = *src->trie;
	memset(c->trie->prev_hist, -1, sizeof(c->trie->prev_hist)); // as lm_trie_flush
	memset(c->trie->backoff, 0, sizeof(c->trie->backoff));
	c->base.refcount = 2;
	c->base.tmp_wids = ckd_calloc(c->base.n, sizeof(*c->base.tmp_wids));
	return (ngram_model_t *)c;
}

static void omni_lm_clone_free(ngram_model_t *lm) {
	omni_ngram_model_trie_t *c = (omni_ngram_model_trie_t *)lm;
	if (c->base.refcount != 1)
		return; // still referenced: leaking a few bytes beats freeing what is in use
	ckd_free(c->base.tmp_wids);
	ckd_free(c->trie);
	ckd_free(c);
}

// omni_lm_clone_scores_same: the clone and the original give the same trigram scores, asked in
// turns so that each one's history cache is exercised.
static int omni_lm_clone_scores_same(ngram_model_t *lm, ngram_model_t *c) {
	int32 n = (int32)ngram_model_get_counts(lm)[0];
	for (int32 i = 0; i < 200; i++) {
		int32 w = (i * 7919) % n, h1 = (i * 104729 + 17) % n, h2 = (i * 1299709 + 3) % n;
		int32 u1, u2;
		if (ngram_tg_score(lm, w, h1, h2, &u1) != ngram_tg_score(c, w, h1, h2, &u2) || u1 != u2)
			return 0;
		if (ngram_bg_score(c, h2, w, &u2) != ngram_bg_score(lm, h2, w, &u1) || u1 != u2)
			return 0;
	}
	return 1;
}

static int omni_use_lm(ps_decoder_t *ps, ngram_model_t *lm) {
	if (ps_set_lm(ps, omni_search, lm) < 0)
		return -1;
	return ps_set_search(ps, omni_search);
}

char *omni_asr_lm_vocab(const char *path) {
	err_set_logfp(NULL);
	logmath_t *lmath = logmath_init(1.0001, 0, 0);
	if (lmath == NULL)
		return NULL;
	// An ngram model keeps its logmath pointer without a reference: free that after the model.
	ngram_model_t *lm = ngram_model_read(NULL, path, NGRAM_AUTO, lmath);
	if (lm == NULL) {
		logmath_free(lmath);
		return NULL;
	}
	int32 n = (int32)ngram_model_get_counts(lm)[0];
	size_t size = 1, used = 0;
	for (int32 i = 0; i < n; i++) {
		const char *w = ngram_word(lm, i);
		if (w != NULL)
			size += strlen(w) + 1;
	}
	char *out = malloc(size);
	if (out != NULL) {
		for (int32 i = 0; i < n; i++) {
			const char *w = ngram_word(lm, i);
			if (w == NULL)
				continue;
			size_t l = strlen(w);
			memcpy(out + used, w, l);
			used += l;
			out[used++] = '\n';
		}
		out[used] = '\0';
	}
	ngram_model_free(lm);
	logmath_free(lmath);
	return out;
}

omni_asr_shared_t *omni_asr_shared_new(const char *hmm, const char *dict, const char *lm,
                                       omni_dec_t *first, const char **why) {
	first->ps = NULL;
	first->lm = NULL;
	first->cmn0 = NULL;
	first->cmn0type = 0;
	*why = NULL;
	ps_decoder_t *ps = omni_init(hmm, dict, NULL);
	if (ps == NULL)
		return NULL;
	if (!omni_ps_head_ok(ps)) {
		ps_free(ps);
		*why = "ps_decoder_t layout differs from pocketsphinx 5prealpha";
		first->ps = omni_init(hmm, dict, lm);
		return NULL;
	}
	ngram_model_t *master = ngram_model_read(ps_get_config(ps), lm, NGRAM_AUTO, ps_get_logmath(ps));
	if (master == NULL) {
		ps_free(ps);
		return NULL;
	}
	ngram_model_t *clone = NULL;
	if (!omni_lm_ok(master, ps_get_logmath(ps))) {
		*why = "ngram model layout differs from sphinxbase 5prealpha";
	} else {
		clone = omni_lm_clone(master);
		if (!omni_lm_clone_scores_same(master, clone)) {
			*why = "a clone of the language model scores differently";
			ngram_model_free(clone); // 2 -> 1
			omni_lm_clone_free(clone);
			clone = NULL;
		}
	}
	if (clone == NULL) { // fall back: this decoder owns the model
		int rc = omni_use_lm(ps, master);
		ngram_model_free(master); // the search holds its own reference
		if (rc < 0) {
			ps_free(ps);
			*why = NULL;
			return NULL;
		}
		first->ps = ps;
		return NULL;
	}
	if (omni_use_lm(ps, clone) < 0) {
		ps_free(ps);
		ngram_model_free(clone);
		omni_lm_clone_free(clone);
		ngram_model_free(master);
		return NULL;
	}
	omni_asr_shared_t *s = ckd_calloc(1, sizeof(*s));
	omni_ps_head_t *h = (omni_ps_head_t *)ps;
	s->lm = master;
	s->lmath = logmath_retain(ps_get_logmath(ps));
	s->dict = dict_retain(h->dict);
	s->d2p = dict2pid_retain(h->d2p);
	first->ps = ps;
	first->lm = clone;
	return s;
}

int omni_asr_dec_new(omni_asr_shared_t *s, const char *hmm, const char *dict, const char *lm,
                     omni_dec_t *out) {
	out->ps = NULL;
	out->lm = NULL;
	out->cmn0 = NULL;
	out->cmn0type = 0;
	if (s == NULL) {
		out->ps = omni_init(hmm, dict, lm);
		return out->ps == NULL ? -1 : 0;
	}
	ps_decoder_t *ps = omni_init(hmm, NULL, NULL);
	if (ps == NULL)
		return -1;
	if (!omni_ps_head_ok(ps)) {
		ps_free(ps);
		return -1;
	}
	// Swap the fillers-only dictionary for the shared one before the search is built on it.
	omni_ps_head_t *h = (omni_ps_head_t *)ps;
	dict2pid_free(h->d2p);
	h->d2p = dict2pid_retain(s->d2p);
	dict_free(h->dict);
	h->dict = dict_retain(s->dict);
	ngram_model_t *clone = omni_lm_clone(s->lm);
	if (omni_use_lm(ps, clone) < 0) {
		ps_free(ps);
		ngram_model_free(clone);
		omni_lm_clone_free(clone);
		return -1;
	}
	out->ps = ps;
	out->lm = clone;
	return 0;
}

void omni_asr_dec_free(omni_dec_t *d) {
	if (d->ps != NULL)
		ps_free(d->ps);
	if (d->lm != NULL) {
		ngram_model_free(d->lm); // our reference: 2 -> 1 once the search has let go
		omni_lm_clone_free(d->lm);
	}
	d->ps = NULL;
	d->lm = NULL;
	free(d->cmn0);
	d->cmn0 = NULL;
}

int omni_dec_start_utt(omni_dec_t *d) {
	feat_t *f = ps_get_feat(d->ps);
	cmn_t *c = f != NULL ? f->cmn_struct : NULL;
	if (c != NULL && c->veclen > 0) {
		if (d->cmn0 == NULL) {
			// First utterance of a fresh decoder: its mean is the model's -cmninit.
			d->cmn0 = malloc(sizeof(mfcc_t) * c->veclen);
			if (d->cmn0 != NULL)
				cmn_live_get(c, d->cmn0);
			d->cmn0type = f->cmn;
		} else {
			cmn_live_set(c, d->cmn0);
			f->cmn = d->cmn0type;
		}
	}
	// A new stream resets the front end's noise estimate (-remove_noise), which also adapts
	// to what the decoder heard before.
	if (ps_start_stream(d->ps) < 0)
		return -1;
	return ps_start_utt(d->ps);
}

void omni_asr_shared_free(omni_asr_shared_t *s) {
	if (s == NULL)
		return;
	ngram_model_free(s->lm);
	logmath_free(s->lmath);
	dict_free(s->dict);
	dict2pid_free(s->d2p);
	ckd_free(s);
}
