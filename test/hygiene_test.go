package test

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestNoSpecSectionCitations keeps the source and docs readable on their own. The design
// documents live outside this repository, so a comment that cites a section number tells a reader
// nothing: it must state the rule it relies on. No Go file may contain a section sign, and
// README.md and docs/ may neither cite sections nor point at ../shared/.
func TestNoSpecSectionCitations(t *testing.T) {
	t.Parallel()
	hits, err := outOfRepoCitations(repoRoot(t))
	require.NoError(t, err)
	require.Empty(t, hits, "state the rule itself instead of citing a document outside the repository")
}

// TestOutOfRepoCitationsDetects checks the checker itself on a made-up tree.
func TestOutOfRepoCitationsDetects(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	files := map[string]string{
		"a.go":                  "package a\n\n// A plain comment.\n",
		"internal/b/b.go":       "package b\n\n// Merged per stage (\u00a74.7.4).\n",
		"internal/b/b_test.go":  "package b\n\nconst s = \"\u00a7\"\n",
		"internal/b/notes.md":   "\u00a71 is fine outside docs/\n",
		"docs/X.md":             "# X\n\nSee `../shared/spec/x.md`.\n",
		"docs/Y.md":             "# Y\n\nAs in \u00a710.\n",
		"docs/Z.md":             "# Z\n\nSelf-contained.\n",
		"README.md":             "# R\n",
		"node_modules/m/m.go":   "package m // \u00a7\n",
		"test/openai-node/x.go": "package x\n",
		".git/objects/whatever": "\u00a7",
	}
	for name, body := range files {
		p := filepath.Join(root, filepath.FromSlash(name))
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(body), 0o644))
	}
	hits, err := outOfRepoCitations(root)
	require.NoError(t, err)
	require.Equal(t, []string{"docs/X.md:3", "docs/Y.md:3", "internal/b/b.go:3", "internal/b/b_test.go:3"}, hits)
}

// outOfRepoCitations returns "path:line" (slash-separated, sorted) for every line of a .go file
// that holds a section sign, and every line of README.md or docs/*.md that holds one or points
// at ../shared/. Third-party trees (.git, node_modules) are skipped.
func outOfRepoCitations(root string) ([]string, error) {
	var hits []string
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == ".git" || d.Name() == "node_modules" {
				return filepath.SkipDir
			}
			return nil
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		isDoc := rel == "README.md" || (strings.HasPrefix(rel, "docs/") && strings.HasSuffix(rel, ".md"))
		if !isDoc && !strings.HasSuffix(rel, ".go") {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 0, 64*1024), 4*1024*1024)
		for n := 1; sc.Scan(); n++ {
			line := sc.Text()
			if strings.Contains(line, "\u00a7") || (isDoc && strings.Contains(line, "../shared/")) {
				hits = append(hits, fmt.Sprintf("%s:%d", rel, n))
			}
		}
		if err := sc.Err(); err != nil {
			return fmt.Errorf("reading %s: %w", rel, err)
		}
		return nil
	})
	slices.Sort(hits)
	return hits, err
}
