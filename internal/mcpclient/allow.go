package mcpclient

import (
	"fmt"
	"net/url"
	"strings"
)

// AllowList is the operator's list of URL prefixes a session's server_url
// must fall under. Empty allows nothing: a client's session.update must not
// make the server reach arbitrary hosts (server-side request forgery).
type AllowList struct {
	prefixes []*url.URL
}

// ParseAllowList checks each prefix is an absolute http(s) URL with a host.
func ParseAllowList(prefixes []string) (AllowList, error) {
	var a AllowList
	for _, p := range prefixes {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		u, err := parseHTTPURL(p)
		if err != nil {
			return AllowList{}, fmt.Errorf("mcp allowed url %q: %w", p, err)
		}
		a.prefixes = append(a.prefixes, u)
	}
	return a, nil
}

// Len is the number of prefixes.
func (a AllowList) Len() int { return len(a.prefixes) }

// Permits reports whether raw falls under one prefix: same scheme, same host
// and port, and a path that continues the prefix's path at a segment
// boundary (so http://h/mcp permits http://h/mcp/x but not http://h/mcpevil,
// and http://h:80 does not permit http://h:8080).
func (a AllowList) Permits(raw string) bool {
	u, err := parseHTTPURL(raw)
	if err != nil {
		return false
	}
	for _, p := range a.prefixes {
		if p.Scheme != u.Scheme || !strings.EqualFold(p.Host, u.Host) {
			continue
		}
		pp := p.EscapedPath()
		up := u.EscapedPath()
		if pp == "" || pp == "/" || up == pp ||
			(strings.HasPrefix(up, pp) && (strings.HasSuffix(pp, "/") || up[len(pp)] == '/')) {
			return true
		}
	}
	return false
}

func parseHTTPURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("not a URL: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("scheme must be http or https")
	}
	if u.Host == "" {
		return nil, fmt.Errorf("no host")
	}
	if u.User != nil {
		return nil, fmt.Errorf("user info is not allowed in the URL")
	}
	if err := checkNormalPath(u); err != nil {
		return nil, err
	}
	return u, nil
}

// checkNormalPath refuses a path that a server or a proxy in front of it could read as another
// one: the prefix check compares paths as written, so `/mcp/%2e%2e/admin`, `/mcp/..%2fadmin`
// or `/mcp/..\admin` would pass under `/mcp` and then reach `/admin` behind a proxy that
// decodes and normalises. The path is decoded, its backslashes read as slashes and its dot
// segments removed (RFC 3986, 5.2.4); a path that changes under this, or that spells a dot, a
// slash or a backslash encoded, is refused rather than rewritten, so the URL requested is the
// URL checked.
func checkNormalPath(u *url.URL) error {
	esc := strings.ToLower(u.EscapedPath())
	for _, enc := range []string{"%2e", "%2f", "%5c"} {
		if strings.Contains(esc, enc) {
			return fmt.Errorf("encoded dots, slashes and backslashes (%s) are not allowed in the path", strings.ToUpper(enc))
		}
	}
	if strings.Contains(u.Path, `\`) {
		return fmt.Errorf("backslashes are not allowed in the path")
	}
	if removeDotSegments(u.Path) != u.Path {
		return fmt.Errorf("dot segments (. and ..) are not allowed in the path")
	}
	return nil
}

// removeDotSegments is RFC 3986's remove_dot_segments over a decoded path.
func removeDotSegments(p string) string {
	segs := strings.Split(p, "/")
	out := make([]string, 0, len(segs))
	for i, s := range segs {
		last := i == len(segs)-1
		switch s {
		case ".":
			if last {
				out = append(out, "")
			}
		case "..":
			if len(out) > 1 {
				out = out[:len(out)-1]
			}
			if last {
				out = append(out, "")
			}
		default:
			out = append(out, s)
		}
	}
	return strings.Join(out, "/")
}
