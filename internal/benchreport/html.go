package benchreport

import (
	_ "embed"
	"fmt"
	"html/template"
	"io"
	"strings"
)

//go:embed report.html.tmpl
var pageTemplate string

// parsePage parses the page once per render: rendering is rare, and a package-level template
// would be the package's only global.
func parsePage() (*template.Template, error) {
	return template.New("report").Funcs(template.FuncMap{
		"num":  formatNum,
		"unit": withUnit,
	}).Parse(pageTemplate)
}

// pageView is what report.html.tmpl renders.
type pageView struct {
	Report
	CommandLine string
	Histograms  []histView
	Timelines   []timelineView
}

// renderHTML writes r, already [prepared], as a self-contained page. html/template escapes
// every string from the report (keys, labels, the command line) for the context it lands in.
func renderHTML(w io.Writer, r Report) error {
	t, err := parsePage()
	if err != nil {
		return err
	}
	v := pageView{Report: r, CommandLine: shellJoin(r.Command)}
	for i, f := range r.Figures {
		v.Histograms = append(v.Histograms, histogramView(fmt.Sprintf("figure-%d", i), f))
	}
	for i, s := range r.Sessions {
		v.Timelines = append(v.Timelines, timelineViewOf(fmt.Sprintf("session-%d", i), s))
	}
	return t.Execute(w, v)
}

// shellJoin prints argv so that it can be pasted into a POSIX shell.
func shellJoin(argv []string) string {
	out := make([]string, len(argv))
	for i, a := range argv {
		if a != "" && strings.Trim(a, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,+@%") == "" {
			out[i] = a
			continue
		}
		out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(out, " ")
}
