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
	if strings.Contains(u.EscapedPath(), "/../") || strings.HasSuffix(u.EscapedPath(), "/..") {
		return nil, fmt.Errorf("dot-dot path segments are not allowed")
	}
	return u, nil
}
