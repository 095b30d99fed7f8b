package session

import (
	"context"
	"errors"
	"fmt"
	"github.com/omniserve/omniserve/internal/mcpclient"
	"sync"
	"time"

	"go.uber.org/zap"
)

// ManagerConfig holds server-side session limits. Zero values take the documented defaults.
type ManagerConfig struct {
	// MCPAllowList is the URL prefixes a session's MCP tools may reach
	// (realtime.mcp_allowed_urls); empty allows none.
	MCPAllowList mcpclient.AllowList
	// MCPLimits bound each MCP server's handshake, listing and calls; zero = the defaults.
	MCPLimits mcpclient.Limits
	// MaxSessions bounds concurrent sessions (admission slots). Default 32, as server.max_sessions.
	MaxSessions int
	// IdleTimeout is the receive-idle timeout when a session sets none. Default 300 s.
	IdleTimeout time.Duration
	// TurnDetection is a new session's server_vad settings and the defaults a turn_detection
	// object starts from (the server passes pipeline.thinker.vad). Default
	// defaultTurnDetection(). Type, CreateResponse and InterruptResponse are always server_vad,
	// true and true.
	TurnDetection *TurnDetection
	// MaxOutputLead bounds how far audio is sent ahead of real time per response. Default 500 ms.
	MaxOutputLead time.Duration
	// MaxPendingInputBytes bounds buffered, not yet processed input per session. Default 16 MiB.
	MaxPendingInputBytes int
	// DrainGrace is how long live sessions may go on after the shutdown starts (Drain): they
	// are told at once with session.closing{reason:"shutdown", grace_ms}, then closed with
	// session.closed{reason:"shutdown"}. Default 0: closed at once.
	DrainGrace time.Duration
	// MaxIdleTimeout caps the idle timeout a client may set (idle_timeout_s), so an idle client
	// cannot hold a slot indefinitely. Default 30 min.
	MaxIdleTimeout time.Duration
	// MaxInboxBytes bounds the bytes of client commands waiting for the session actor (the
	// connection's reader waits past it). Default defaultMaxInboxBytes.
	MaxInboxBytes int
	// MaxHistoryBytes bounds the conversation's text; past it the oldest items are dropped
	// (conversation.item.deleted). Default defaultMaxHistoryBytes.
	MaxHistoryBytes int
	// DefaultMaxOutputTokens is the reply limit the engine applies when a session sets none
	// or "inf" (pipeline.thinker.max_tokens): the session reports it, so a client sees the
	// limit that cuts its replies. 0: unknown, reported as "inf".
	DefaultMaxOutputTokens int
	// MaxInstructionsBytes bounds session and per-response instructions (error
	// string_above_max_length). Default defaultMaxInstructionsBytes.
	MaxInstructionsBytes int
	// PrefillBudgetTokens bounds the tokens of input a session may queue for the engine between
	// two responses (admission.go; error context_length_exceeded). 0: the model's context
	// window less a reply's room, what one response can read.
	PrefillBudgetTokens int
	// ResumeGrace is how long a session whose connection was lost without a close frame is kept
	// for a resume (session.resume): its engine stream, conversation and admission slot stay.
	// Zero disables resume: the session ends with its connection (the configuration default,
	// realtime.resume_grace, is 30 s).
	ResumeGrace time.Duration
	// MaxSessionLength is every session's expires_at after its creation
	// (realtime.max_session_length); a session with Options.EndsAtExpiry ends there. Default
	// 60 min.
	MaxSessionLength time.Duration
	// Metrics receives the detached-session gauge; nil reports nothing.
	Metrics ManagerMetrics
	// ModelName is reported in session.created when the client names no model.
	ModelName string
	// AcceptModel reports whether a client may name the model so (served names and aliases);
	// nil accepts only ModelName. ServedModels are the names an error lists.
	AcceptModel  func(string) bool
	ServedModels []string
	// Now is the monotonic clock for pacing and timeouts; nil means time.Now.
	Now func() time.Time
	// WallClock is the statistics clock (unix seconds); nil means the real one.
	WallClock func() float64
	// LogStats (--log-stats) logs a TranscriptionItemStats table per transcription session
	// item (transcription.go); turn tables come from the engine's records.
	LogStats bool
	// StructuredStats (--log-format json) logs each item as one structured record instead.
	StructuredStats bool
}

// WithDefaults is c with every zero value replaced by its documented default (the server's
// config table has the same defaults: internal/server TestDefaultsAgree compares them).
func (c ManagerConfig) WithDefaults() ManagerConfig {
	if c.MCPLimits == (mcpclient.Limits{}) {
		c.MCPLimits = mcpclient.DefaultLimits()
	}
	if c.MaxSessions <= 0 {
		c.MaxSessions = 32
	}
	td := defaultTurnDetection()
	if c.TurnDetection != nil {
		td.Threshold, td.PrefixPaddingMs, td.SilenceDurationMs = c.TurnDetection.Threshold, c.TurnDetection.PrefixPaddingMs, c.TurnDetection.SilenceDurationMs
	}
	c.TurnDetection = td
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = 300 * time.Second
	}
	if c.MaxIdleTimeout <= 0 {
		c.MaxIdleTimeout = 30 * time.Minute
	}
	c.IdleTimeout = min(c.IdleTimeout, c.MaxIdleTimeout)
	if c.MaxOutputLead <= 0 {
		c.MaxOutputLead = 500 * time.Millisecond
	}
	if c.MaxSessionLength <= 0 {
		c.MaxSessionLength = 60 * time.Minute
	}
	if c.MaxPendingInputBytes <= 0 {
		c.MaxPendingInputBytes = 16 << 20
	}
	if c.MaxInboxBytes <= 0 {
		c.MaxInboxBytes = defaultMaxInboxBytes
	}
	if c.MaxHistoryBytes <= 0 {
		c.MaxHistoryBytes = defaultMaxHistoryBytes
	}
	if c.MaxInstructionsBytes <= 0 {
		c.MaxInstructionsBytes = defaultMaxInstructionsBytes
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.WallClock == nil {
		c.WallClock = func() float64 { return float64(time.Now().UnixNano()) / 1e9 }
	}
	return c
}

// ManagerMetrics is what the manager reports to Prometheus (metrics.Collectors).
type ManagerMetrics interface {
	// AddDetachedSessions moves the gauge of sessions waiting for a resume.
	AddDetachedSessions(delta int)
	// CountPanic counts a panic recovered at the root of a session goroutine.
	CountPanic(component string)
	// CountEviction counts a detached session ended to admit a new client.
	CountEviction()
}

// Admission errors.
var (
	errCapacity     = errors.New("duplex_session_capacity_exhausted")
	errShuttingDown = errors.New("server is shutting down")
)

// Manager admits sessions and shuts them down.
type Manager struct {
	cfg     ManagerConfig
	backend Backend
	log     *zap.Logger

	mu         sync.Mutex
	active     int
	closing    bool
	drainStart time.Time // when Drain ran
	sessions   map[*Session]struct{}
	byID       map[string]*Session
	// detached are the sessions waiting for a resume, with when they lost their connection;
	// evicting those told to give their slot to a new client (Acquire).
	detached map[*Session]time.Time
	evicting map[*Session]bool
	idle     chan struct{} // closed and replaced when active drops to 0 during shutdown
	freed    chan struct{} // closed and replaced whenever a slot is released
}

// NewManager returns a Manager; log may be nil.
func NewManager(cfg ManagerConfig, backend Backend, log *zap.Logger) *Manager {
	if log == nil {
		log = zap.NewNop()
	}
	return &Manager{
		cfg:      cfg.WithDefaults(),
		backend:  backend,
		log:      log.Named("session"),
		sessions: make(map[*Session]struct{}),
		byID:     make(map[string]*Session),
		detached: make(map[*Session]time.Time),
		evicting: make(map[*Session]bool),
		idle:     make(chan struct{}),
		freed:    make(chan struct{}),
	}
}

// Config returns the effective configuration.
func (m *Manager) Config() ManagerConfig { return m.cfg }

// SupportsDuplex reports whether the backend can run full-duplex sessions.
func (m *Manager) SupportsDuplex() bool { return m.backend != nil && m.backend.SupportsDuplex() }

// Active returns the number of held admission slots.
func (m *Manager) Active() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.active
}

// Slot is one admission slot; Release is idempotent, so every exit path may call it.
type Slot struct {
	once sync.Once
	m    *Manager
}

// Acquire takes a slot or fails with errCapacity / errShuttingDown.
//
// A session kept for a resume never keeps a live client out: when every slot is taken and one
// of them is held by a detached session, the oldest detached session is ended (reason
// ReasonEvicted: its turn is finalized as a close, a later resume finds no session) and the new
// client waits for its slot, at most until ctx ends.
func (m *Manager) Acquire(ctx context.Context) (*Slot, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for {
		if m.closing {
			return nil, errShuttingDown
		}
		if m.active < m.cfg.MaxSessions {
			m.active++
			return &Slot{m: m}, nil
		}
		if !m.evictOldestLocked() {
			return nil, fmt.Errorf("%w: limit=%d", errCapacity, m.cfg.MaxSessions)
		}
		freed := m.freed
		m.mu.Unlock()
		select {
		case <-freed:
			m.mu.Lock()
		case <-ctx.Done():
			m.mu.Lock()
			return nil, fmt.Errorf("%w: limit=%d, waiting for an evicted session: %w", errCapacity, m.cfg.MaxSessions, context.Cause(ctx))
		}
	}
}

// evictOldestLocked tells the oldest detached session not already told to end; it reports
// whether a slot is on its way (an eviction started now or earlier).
func (m *Manager) evictOldestLocked() bool {
	var oldest *Session
	var at time.Time
	for s, t := range m.detached {
		if m.evicting[s] {
			continue
		}
		if oldest == nil || t.Before(at) {
			oldest, at = s, t
		}
	}
	if oldest == nil {
		return len(m.evicting) > 0
	}
	m.evicting[oldest] = true
	oldest.Stop(ReasonEvicted)
	m.log.Info("evicting the oldest detached session for a new client", zap.String("session_id", oldest.id),
		zap.Duration("detached_for", m.cfg.Now().Sub(at)))
	if m.cfg.Metrics != nil {
		m.cfg.Metrics.CountEviction()
	}
	return true
}

// Release returns the slot.
func (s *Slot) Release() {
	if s == nil {
		return
	}
	s.once.Do(func() {
		m := s.m
		m.mu.Lock()
		m.active--
		close(m.freed)
		m.freed = make(chan struct{})
		if m.active == 0 && m.closing {
			close(m.idle)
			m.idle = make(chan struct{})
		}
		m.mu.Unlock()
	})
}

func (m *Manager) track(s *Session) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closing {
		return false
	}
	m.sessions[s] = struct{}{}
	m.byID[s.id] = s
	return true
}

func (m *Manager) untrack(s *Session) {
	m.mu.Lock()
	delete(m.sessions, s)
	delete(m.byID, s.id)
	m.mu.Unlock()
}

// Lookup returns the live session with id on this server, or nil. Sessions are not shared
// between replicas: a resume must reach the replica that holds the session.
func (m *Manager) Lookup(id string) *Session {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.byID[id]
}

// AcceptsModel reports whether a client may name the model so (a served name or alias).
func (m *Manager) AcceptsModel(name string) bool {
	if m.cfg.AcceptModel != nil {
		return m.cfg.AcceptModel(name)
	}
	return name != "" && name == m.cfg.ModelName
}

// ServedModels are the model names the server lists (error messages name them).
func (m *Manager) ServedModels() []string {
	if len(m.cfg.ServedModels) == 0 && m.cfg.ModelName != "" {
		return []string{m.cfg.ModelName}
	}
	return m.cfg.ServedModels
}

// ResumeGrace is how long a session whose connection was lost waits for a resume (0: resume off).
func (m *Manager) ResumeGrace() time.Duration { return m.cfg.ResumeGrace }

// Detached returns the number of sessions waiting for a resume (they still hold their slots).
func (m *Manager) Detached() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.detached)
}

// setDetached records that s lost its connection at at (on) or was resumed or ended (off).
func (m *Manager) setDetached(s *Session, on bool, at time.Time) {
	m.mu.Lock()
	_, was := m.detached[s]
	if on {
		m.detached[s] = at
	} else {
		delete(m.detached, s)
		delete(m.evicting, s)
	}
	m.mu.Unlock()
	if m.cfg.Metrics == nil || was == on {
		return
	}
	if on {
		m.cfg.Metrics.AddDetachedSessions(1)
	} else {
		m.cfg.Metrics.AddDetachedSessions(-1)
	}
}

// Drain starts the shutdown without blocking: new sessions are refused and every live session
// is told at once with session.closing{reason:"shutdown", grace_ms: DrainGrace}. Shutdown ends
// them when the grace is over. Later calls do nothing.
func (m *Manager) Drain() {
	m.mu.Lock()
	if m.closing {
		m.mu.Unlock()
		return
	}
	m.closing = true
	m.drainStart = m.cfg.Now()
	live := m.liveLocked()
	m.mu.Unlock()
	m.log.Info("draining sessions", zap.Int("sessions", len(live)), zap.Duration("grace", m.cfg.DrainGrace))
	for _, s := range live {
		select { // never blocks: a session already told keeps the first grace
		case s.ctl.drain <- m.cfg.DrainGrace:
		default:
		}
	}
}

func (m *Manager) liveLocked() []*Session {
	live := make([]*Session, 0, len(m.sessions))
	for s := range m.sessions {
		live = append(live, s)
	}
	return live
}

// Shutdown drains (see Drain) if that has not started, lets sessions go on until DrainGrace
// after the drain started, then closes every live session with session.closed{reason:
// "shutdown"} and waits until every slot is returned or ctx ends.
func (m *Manager) Shutdown(ctx context.Context) error {
	m.Drain()
	m.mu.Lock()
	if m.active == 0 {
		m.mu.Unlock()
		return nil
	}
	idle := m.idle
	left := m.cfg.DrainGrace - m.cfg.Now().Sub(m.drainStart)
	m.mu.Unlock()
	if left > 0 {
		t := time.NewTimer(left)
		defer t.Stop()
		select {
		case <-idle:
			return nil
		case <-t.C:
		case <-ctx.Done():
		}
	}
	m.mu.Lock()
	live := m.liveLocked()
	idle = m.idle
	active := m.active
	m.mu.Unlock()
	for _, s := range live {
		s.Stop(ReasonShutdown)
	}
	if active == 0 {
		return nil
	}
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for %d sessions to close: %w", m.Active(), context.Cause(ctx))
	}
}
