// Word posteriors for include=logprobs.
//
// The decoders run one forward pass (-bestpath no, see omni_cfg in asrshare.c), so ps_seg_prob
// gives 0 for every word. The posteriors come from the word lattice of the finished utterance:
// build it, run the best-path pass the library would have run with -bestpath yes (its weights:
// -bestpathlw / -lw and 1 / -ascale), then the forward-backward pass. The transcript stays the
// forward pass's: each of its segments (word, start frame, end frame) is looked up as a lattice
// link, whose alpha + beta - norm is the word's posterior. Only requests that ask pay for this.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pocketsphinx.h>
#include <ps_lattice.h>
#include <ps_search.h>
#include <sphinxbase/logmath.h>
#include <sphinxbase/cmd_ln.h>

#include "asrprob.h"

// word_prob returns the frame posterior of word at frame t: the summed posterior of the lattice
// links of that word (alternate pronunciations included) that span t. A single link is too
// narrow: the lattice holds the same word with start and end frames a few frames apart, which
// split its probability among them (the best path's own link gave "go" of a clean "go forward
// ten meters" e^-17.6). found is 0 when no such link spans t.
static int32 word_prob(ps_lattice_t *dag, logmath_t *lmath, const char *word, int t, int *found) {
	int32 sum = logmath_get_zero(lmath);
	*found = 0;
	for (ps_latnode_iter_t *it = ps_latnode_iter(dag); it != NULL; it = ps_latnode_iter_next(it)) {
		ps_latnode_t *node = ps_latnode_iter_node(it);
		int16 fef, lef;
		int sf = ps_latnode_times(node, &fef, &lef);
		if (sf > t || lef < t || strcmp(ps_latnode_baseword(dag, node), word) != 0)
			continue;
		for (ps_latlink_iter_t *li = ps_latnode_exits(node); li != NULL; li = ps_latlink_iter_next(li)) {
			ps_latlink_t *link = ps_latlink_iter_link(li);
			int16 lsf;
			if (ps_latlink_times(link, &lsf) < t)
				continue;
			sum = logmath_add(lmath, sum, ps_latlink_prob(dag, link, NULL));
			*found = 1;
		}
	}
	return sum;
}

char *omni_word_probs(ps_decoder_t *ps) {
	ps_lattice_t *dag = ps_get_lattice(ps);
	if (dag == NULL)
		return NULL;
	cmd_ln_t *cfg = ps_get_config(ps);
	ngram_model_t *lm = ps_get_lm(ps, ps_get_search(ps));
	float32 ascale = 1.0f / cmd_ln_float32_r(cfg, "-ascale");
	float32 lwf = cmd_ln_float32_r(cfg, "-bestpathlw") / cmd_ln_float32_r(cfg, "-lw");
	if (ps_lattice_bestpath(dag, lm, lwf, ascale) == NULL)
		return NULL;
	ps_lattice_posterior(dag, lm, ascale);
	logmath_t *lmath = ps_get_logmath(ps);

	size_t cap = 256, len = 0;
	char *out = malloc(cap);
	if (out == NULL)
		return NULL;
	out[0] = '\0';
	// ps_seg_frames adds the acoustic model's stream offset to the search's frames; the lattice
	// counts search frames from 0. The offset is not 0 on many utterances (measured: 38 after
	// 0.5 s of digital silence, 318 for goforward said twice), and looked up unshifted their
	// words missed their links and fell to "not in the lattice" (issue 26). The first segment,
	// the start marker, begins at search frame 0, so its start frame is the offset.
	int offset = -1;
	for (ps_seg_t *seg = ps_seg_iter(ps); seg != NULL; seg = ps_seg_next(seg)) {
		const char *word = ps_seg_word(seg);
		int sf, ef, found;
		ps_seg_frames(seg, &sf, &ef);
		if (offset < 0)
			offset = sf;
		char base[300];
		snprintf(base, sizeof base, "%s", word);
		char *paren = strchr(base, '(');
		if (paren != NULL && paren > base && base[strlen(base) - 1] == ')')
			*paren = '\0'; // "the(2)": the lattice's base word is "the"
		int32 p = word_prob(dag, lmath, base, (sf + ef) / 2 - offset, &found);
		char line[320];
		int n;
		if (found)
			n = snprintf(line, sizeof line, "%s\t%d\t%.9g\n", word, sf, logmath_log_to_ln(lmath, p));
		else
			n = snprintf(line, sizeof line, "%s\t%d\tnan\n", word, sf);
		if (n < 0 || (size_t)n >= sizeof line)
			continue; // a word longer than 300 bytes: not in any dictionary we load
		if (len + (size_t)n + 1 > cap) {
			cap = 2 * (len + (size_t)n + 1);
			char *grown = realloc(out, cap);
			if (grown == NULL) {
				free(out);
				ps_seg_free(seg);
				return NULL;
			}
			out = grown;
		}
		memcpy(out + len, line, (size_t)n + 1);
		len += (size_t)n;
	}
	return out;
}
