// Package admin serves a Loop's operator surface over HTTP: a JSON API
// to read agents, their change history, proposals, events and the failure
// memory and to act on them (rewind, set config, threshold, critical mark,
// approve, reject), a live event stream (server-sent events), and the
// loop's metrics in the Prometheus text format.
//
//	mux.Handle("/selfimprove/", http.StripPrefix("/selfimprove",
//		admin.Handler(loop, admin.Options{Token: os.Getenv("SELFIMPROVE_TOKEN")})))
//
// With a token, every endpoint needs "Authorization: Bearer <token>"
// (unless Options open the reads or the metrics); without one, reads are
// open and every mutation is refused with 403. Options.IntakeToken only
// reports outcomes and reads configs, Options.ScoreToken only posts
// scores, each for the agents its option names (IntakeAgents,
// ScoreAgents; none by default). A request whose Host is not
// a loopback name or address, nor in Options.AllowedHosts, gets 421 (DNS
// rebinding). Mutations are POST with a
// JSON body. Errors are JSON (ErrorBody) with the HTTP status: 400 naming
// the field for malformed input, 401/403 for authentication, 404 for an
// unknown agent or proposal, 409 when the loop's state does not allow the
// action, 413 for a body over the limit, 415 for a body that is not JSON.
// The handler reads the Loop through its public API only.
package admin

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/internal/calltotals"
)

// Options configures Handler. The zero value serves reads without a token
// and refuses mutations.
type Options struct {
	// Token is the bearer token every request must carry as
	// "Authorization: Bearer <token>", compared in constant time. Empty
	// (the default): reads are open and mutations are refused with 403.
	Token string
	// OpenReads serves the GET endpoints (and /metrics) without the
	// token. Default false.
	OpenReads bool
	// OpenMetrics serves /metrics alone without the token, for scrapers.
	// Default false.
	OpenMetrics bool
	// MaxBodyBytes bounds a request body; a longer one gets 413. Default
	// 64 KiB.
	MaxBodyBytes int64
	// MaxAgentSeries bounds the agents with their own series in /metrics:
	// the first ones by ID; the others are summed under the label value
	// agent="_other". Default 1,000. The series' counters are running
	// totals that never go down, though an agent's own counts start again
	// from zero when it is evicted and loaded again: the handler remembers
	// the totals of up to MaxAgentSeries series whose agents left memory
	// (beyond that, the least recently seen start again from zero).
	MaxAgentSeries int
	// UnhealthyBelow is the health under which an agent is listed as
	// unhealthy (GET /api/agents?unhealthy=true), in [0, 1]. Default 0.9.
	UnhealthyBelow float64
	// StreamBuffer bounds the events waiting for one stream client; a
	// client that falls this far behind is told (an event "dropped") and
	// disconnected. Default 64.
	StreamBuffer int
	// StreamKeepAlive is the interval of the comment lines that keep an
	// idle stream open through proxies. Default 15 seconds.
	StreamKeepAlive time.Duration
	// WriteTimeout bounds each write to a stream client; a client that
	// does not read for this long is disconnected. Default 10 seconds.
	WriteTimeout time.Duration
	// AllowedHosts lists the host names (without the port) that the Host
	// header of a request may carry besides the loopback names and
	// addresses ("localhost", "*.localhost", 127.0.0.0/8, ::1), which
	// are always accepted: a request for any other host is refused with
	// 421, so that a page of another site cannot read the API through
	// DNS rebinding. List the names the handler is reached by (the
	// server's name, the name a proxy forwards); an entry that starts
	// with a dot accepts the subdomains of the name that follows; "*"
	// accepts every host (for a proxy that checks Host itself). Default:
	// none, loopback only.
	AllowedHosts []string
	// HostHint ends the 421 answer to a request for a host that is not
	// allowed, in parentheses after the host: what to do to serve it. A
	// program that fills AllowedHosts from its own flag or setting names
	// that one here (selfimprove serve: its --allow-host flag). Default
	// "list it in admin.Options.AllowedHosts".
	HostHint string
	// TokenHint ends the 403 answer to a mutation when no token is
	// configured, in parentheses: how to set one. A program that reads
	// the token from its own flag or setting names that one here
	// (selfimprove serve: SELFIMPROVE_TOKEN or --token-file). Default
	// "set admin.Options.Token".
	TokenHint string
	// MaxStreams bounds the event streams served at once; one more gets
	// 503 with Retry-After. Default 100.
	MaxStreams int
	// Dashboard serves GET / (the exact root), behind the token like the
	// other reads. Default: the embedded dashboard (see Dashboard), whose
	// page, script and style (GET /, /app.js, /app.css) are served
	// without the token: they hold no data, and the page asks for the
	// token when the API wants one.
	Dashboard http.Handler
	// Now is the clock of the timelines' samples, of the answers' "now"
	// (the dashboard's relative times) and of the intake's rate bound;
	// give the Loop's clock when it is not the real one. Default
	// time.Now.
	Now func() time.Time
	// SampleEvery is how often the handler samples every agent's
	// counters for the timelines (GET /api/agents/{agent}/series) and the
	// overview (GET /api/overview), from the time Handler is called until
	// the Loop closes; it also samples an agent at each change and at
	// each read of its series, and every agent at a read of the overview
	// when the last sample is older. Negative: only at those reads and
	// changes. Default 1 minute.
	SampleEvery time.Duration
	// MaxTimelines bounds the agents with a timeline (about 10 KB each):
	// the first ones sampled; once it is reached, an agent with history
	// (a config version past the first, a manual threshold, a critical
	// mark) takes the place of one without, so that agents made by
	// reports alone never keep one with history out. Default 10,000.
	MaxTimelines int
	// Logger receives the loop errors behind 500 answers. Default
	// slog.Default().
	Logger *slog.Logger

	// IntakeToken is a second bearer token that the outcome intake (POST
	// /api/outcomes and GET /api/agents/{agent}/config) accepts besides
	// Token, for agents that may report outcomes and read their config
	// but not act as an operator, and only for the agents IntakeAgents
	// allows. Default empty: Token alone. With neither token, the intake
	// refuses outcomes with 403 like any mutation.
	IntakeToken string
	// IntakeAgents are the agents IntakeToken may report for and read
	// the config of: exact agent IDs, or prefixes ending in "*" ("py-*";
	// "*" alone allows every agent, the loop's own Go agents included).
	// A "*" elsewhere is a plain character. Default none: the intake
	// token is refused (403 naming IntakeAgents) until the operator
	// names its agents, so that it cannot steer an agent of the Go
	// program. Token is not bound by it.
	IntakeAgents []string
	// IntakeNewAgents bounds the agents each token (Token, IntakeToken)
	// may create through the intake: a batch that names an agent the
	// loop does not know takes one from the token's bucket, which holds
	// IntakeNewAgents and refills at IntakeNewAgents a minute; a batch
	// over it gets 429 with Retry-After and is not booked. Default 60.
	IntakeNewAgents int
	// ScoreToken is a bearer token for an external judge: it may only
	// post scores (POST /api/agents/{agent}/score), and only for the
	// agents ScoreAgents allows. Default empty: scores need Token.
	ScoreToken string
	// ScoreAgents are the agents ScoreToken may score, written as
	// IntakeAgents. Default none: the score token is refused (403
	// naming ScoreAgents).
	ScoreAgents []string
	// MaxOutcomes bounds the outcomes of one POST /api/outcomes (which
	// MaxBodyBytes bounds too). Default 500.
	MaxOutcomes int
	// OutcomeRate bounds the outcomes the intake books and the scores
	// POST /api/agents/{agent}/score books, a second, over all agents
	// (a score counts as one outcome), with bursts of MaxOutcomes or one
	// second's worth,
	// whichever is more; a batch over it gets 429 with Retry-After and
	// is not booked. A batch is charged before the loop's state is read
	// (when nothing is left, before its body is read); one refused after
	// that (a version its agent never had, IntakeNewAgents) stays
	// charged. Default 1,000.
	OutcomeRate float64
	// OutcomeIDs bounds the outcome IDs (Outcome.ID) the intake
	// remembers, to book each outcome once: an outcome sent again is
	// known as one booked while its ID is among the last OutcomeIDs
	// booked (a minute and more at OutcomeRate's default), about 45
	// bytes each (3 MB at the default). Per process: a sidecar
	// restarted, or another replica behind a load balancer, books it
	// again. Default 65,536.
	OutcomeIDs int
}

func (o Options) withDefaults() Options {
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = 64 << 10
	}
	if o.MaxAgentSeries <= 0 {
		o.MaxAgentSeries = 1000
	}
	if o.UnhealthyBelow <= 0 || o.UnhealthyBelow > 1 {
		o.UnhealthyBelow = 0.9
	}
	if o.StreamBuffer <= 0 {
		o.StreamBuffer = 64
	}
	if o.StreamKeepAlive <= 0 {
		o.StreamKeepAlive = 15 * time.Second
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = 10 * time.Second
	}
	if o.MaxStreams <= 0 {
		o.MaxStreams = 100
	}
	if o.HostHint == "" {
		o.HostHint = "list it in admin.Options.AllowedHosts"
	}
	if o.TokenHint == "" {
		o.TokenHint = "set admin.Options.Token"
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.SampleEvery == 0 {
		o.SampleEvery = time.Minute
	}
	if o.MaxTimelines <= 0 {
		o.MaxTimelines = 10000
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.MaxOutcomes <= 0 {
		o.MaxOutcomes = 500
	}
	if !(o.OutcomeRate > 0) || math.IsInf(o.OutcomeRate, 1) {
		o.OutcomeRate = 1000
	}
	if o.IntakeNewAgents <= 0 {
		o.IntakeNewAgents = 60
	}
	if o.OutcomeIDs <= 0 {
		o.OutcomeIDs = 1 << 16
	}
	return o
}

// server is the handler's state.
type server struct {
	l      *selfimprove.Loop
	o      Options
	token  [32]byte // SHA-256 of Options.Token
	intake [32]byte // SHA-256 of Options.IntakeToken
	scorer [32]byte // SHA-256 of Options.ScoreToken
	rate   *rateBound
	// lim are the intake's bounds on agents and its counters.
	lim     intakeLimits
	streams chan struct{} // a place for each stream served, Options.MaxStreams
	// samples are the agents' timelines.
	samples sampler
	// ov is the overview's sort keys (overview.go).
	ov ovIndex
	// ids are the outcome IDs booked (outcome_ids.go).
	ids *outcomeIDs
	// totals keep /metrics' per-agent counters monotonic (metrics_totals.go).
	totals *calltotals.Totals
}

// access is what an endpoint needs to be served.
type access int

const (
	read access = iota
	metricsRead
	mutate
	public       // the embedded dashboard's static files
	intakeRead   // a read of the intake: Token or IntakeToken
	intakeMutate // a mutation of the intake: Token or IntakeToken
	scoreMutate  // a score: Token or ScoreToken
)

// role is who a request was served as: the token it carried.
type role int

const (
	roleOpen     role = iota // no token was asked for
	roleOperator             // Options.Token
	roleIntake               // Options.IntakeToken
	roleScore                // Options.ScoreToken
	nRoles
)

// Handler returns the HTTP handler of l's operator surface. The paths are
// relative to where it is mounted (use http.StripPrefix to mount it under
// a prefix); agent and proposal IDs are single escaped path segments
// (url.PathEscape; AgentSummary.Ref is the escaped form):
//
//	GET  /api/agents                     ?prefix= &unhealthy=true &limit= &after=
//	GET  /api/agents/{agent}
//	GET  /api/agents/{agent}/series      ?range=hour|day|week
//	GET  /api/overview                   ?limit= &offset=  (agents in trouble first)
//	POST /api/agents/{agent}/rewind      {"version": 2, "reason": "…"}
//	POST /api/agents/{agent}/try         {"config": {…}, "reason": "…"} (verified, rolled back if worse)
//	GET  /api/agents/{agent}/config      the config in force, with an ETag (intake: Token or IntakeToken)
//	POST /api/agents/{agent}/config      {"config": {…}}
//	POST /api/agents/{agent}/threshold   {"failures": 5, "window": "10m", "cooldown": "5m"}
//	POST /api/agents/{agent}/critical    {"critical": true}
//	POST /api/agents/{agent}/score       {"call_id": "…", "score": 0.8, "key": "…"} (Token or ScoreToken)
//	GET  /api/proposals                  ?status= &agent=
//	POST /api/proposals/{id}/approve     {}
//	POST /api/proposals/{id}/reject      {"reason": "…"}
//	GET  /api/events                     ?agent= &type= &since= &until= &after= &before= &limit=
//	GET  /api/events/stream              server-sent events; Last-Event-ID resumes
//	GET  /api/similar                    ?q= &k=
//	POST /api/outcomes                   {"outcomes": [{"agent": "…", "success": false, …}]} (intake: Token or IntakeToken)
//	GET  /metrics                        Prometheus text format 0.0.4
//	GET  /                               the dashboard (Options.Dashboard)
//
// docs/admin.md shows each request and response.
func Handler(l *selfimprove.Loop, opts Options) http.Handler {
	s := &server{l: l, o: opts.withDefaults(), token: sha256.Sum256([]byte(opts.Token)), intake: sha256.Sum256([]byte(opts.IntakeToken)),
		scorer: sha256.Sum256([]byte(opts.ScoreToken))}
	s.rate = newRateBound(s.o.OutcomeRate, max(s.o.MaxOutcomes, int(math.Ceil(s.o.OutcomeRate))))
	s.ids = newOutcomeIDs(s.o.OutcomeIDs)
	s.totals = newTotals()
	s.lim.init(&s.o)
	s.streams = make(chan struct{}, s.o.MaxStreams)
	s.samples.agents, s.samples.max = map[string]*timeline{}, s.o.MaxTimelines
	if s.o.SampleEvery > 0 {
		go s.sampleLoop()
	}
	mux := http.NewServeMux()
	route := func(pattern, method string, a access, h http.HandlerFunc) {
		mux.Handle(pattern, s.guard(method, a, h))
	}
	route("/api/agents", http.MethodGet, read, s.listAgents)
	route("/api/agents/{agent}", http.MethodGet, read, s.getAgent)
	route("/api/agents/{agent}/series", http.MethodGet, read, s.getSeries)
	route("/api/overview", http.MethodGet, read, s.overview)
	route("/api/agents/{agent}/rewind", http.MethodPost, mutate, s.rewind)
	route("/api/agents/{agent}/try", http.MethodPost, mutate, s.try)
	getConfig, setConfig := s.guardAs(http.MethodGet, intakeRead, s.agentConfig), s.guard(http.MethodPost, mutate, s.setConfig)
	mux.HandleFunc("/api/agents/{agent}/config", func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			getConfig.ServeHTTP(w, r)
			return
		}
		setConfig.ServeHTTP(w, r)
	})
	route("/api/agents/{agent}/threshold", http.MethodPost, mutate, s.setThreshold)
	route("/api/agents/{agent}/critical", http.MethodPost, mutate, s.markCritical)
	mux.Handle("/api/agents/{agent}/score", s.guardAs(http.MethodPost, scoreMutate, s.score))
	route("/api/proposals", http.MethodGet, read, s.listProposals)
	route("/api/proposals/{id}/approve", http.MethodPost, mutate, s.approve)
	route("/api/proposals/{id}/reject", http.MethodPost, mutate, s.reject)
	route("/api/events", http.MethodGet, read, s.listEvents)
	route("/api/events/stream", http.MethodGet, read, s.stream)
	route("/api/similar", http.MethodGet, read, s.similar)
	route("/api/fleet", http.MethodGet, read, s.fleetStatus)
	mux.Handle("/api/outcomes", s.guardAs(http.MethodPost, intakeMutate, s.outcomes))
	route("/metrics", http.MethodGet, metricsRead, s.metrics)
	if s.o.Dashboard != nil {
		route("/{$}", http.MethodGet, read, s.o.Dashboard.ServeHTTP)
	} else {
		d := Dashboard().ServeHTTP
		route("/{$}", http.MethodGet, public, d)
		route("/app.js", http.MethodGet, public, d)
		route("/app.css", http.MethodGet, public, d)
		route("/glossary.md", http.MethodGet, public, d)
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "", "no such endpoint")
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.hostAllowed(r.Host) {
			w.Header().Set("X-Content-Type-Options", "nosniff")
			writeError(w, http.StatusMisdirectedRequest, "Host", "this handler does not serve the host "+strconv.Quote(r.Host)+
				" ("+s.o.HostHint+")")
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// hostAllowed reports whether a request's Host header names a host the
// handler serves: a loopback name or address, or one of
// Options.AllowedHosts. An empty Host (a request made in-process, or over
// HTTP/1.0) is allowed: no browser sends one.
func (s *server) hostAllowed(hostport string) bool {
	if hostport == "" {
		return true
	}
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.ToLower(strings.TrimSuffix(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"), "."))
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	if ip, err := netip.ParseAddr(host); err == nil && ip.Unmap().IsLoopback() {
		return true
	}
	for _, a := range s.o.AllowedHosts {
		a = strings.ToLower(strings.TrimSuffix(a, "."))
		switch {
		case a == "*", a == host:
			return true
		case strings.HasPrefix(a, ".") && strings.HasSuffix(host, a) && len(host) > len(a):
			return true
		}
	}
	return false
}

// guard checks the method, the token and, for a mutation, the body's
// type and size before h runs.
func (s *server) guard(method string, a access, h http.HandlerFunc) http.Handler {
	return s.guardAs(method, a, func(w http.ResponseWriter, r *http.Request, _ role) { h(w, r) })
}

// guardAs is guard for a handler that needs to know who asks.
func (s *server) guardAs(method string, a access, h func(http.ResponseWriter, *http.Request, role)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Content-Type-Options", "nosniff")
		if r.Method != method && !(method == http.MethodGet && r.Method == http.MethodHead) {
			w.Header().Set("Allow", method)
			writeError(w, http.StatusMethodNotAllowed, "", "method "+r.Method+" not allowed; use "+method)
			return
		}
		who, ok := s.authorized(w, r, a)
		if !ok {
			return
		}
		if a == mutate || a == intakeMutate || a == scoreMutate {
			if !isJSON(r.Header.Get("Content-Type")) {
				writeError(w, http.StatusUnsupportedMediaType, "", "the body must be JSON (Content-Type: application/json)")
				return
			}
			r.Body = http.MaxBytesReader(w, r.Body, s.o.MaxBodyBytes)
		}
		h(w, r, who)
	})
}

// authorized applies the token rules to a request needing a, and answers
// it when it may not go on; it returns the role of the token it carried.
// Token serves every endpoint; IntakeToken only the intake's; ScoreToken
// only scores.
func (s *server) authorized(w http.ResponseWriter, r *http.Request, a access) (role, bool) {
	second := "" // the token a accepts besides Token
	switch a {
	case public:
		return roleOpen, true
	case intakeRead, intakeMutate:
		second = s.o.IntakeToken
	case scoreMutate:
		second = s.o.ScoreToken
	}
	switch {
	case s.o.Token == "" && second == "":
		if a == mutate || a == intakeMutate || a == scoreMutate {
			writeError(w, http.StatusForbidden, "", "no token configured: mutations are disabled ("+s.o.TokenHint+")")
			return roleOpen, false
		}
		return roleOpen, true
	case (a == read || a == intakeRead) && s.o.OpenReads || a == metricsRead && (s.o.OpenReads || s.o.OpenMetrics):
		return roleOpen, true
	}
	given, ok := bearer(r.Header.Get("Authorization"))
	if !ok {
		w.Header().Set("WWW-Authenticate", `Bearer realm="selfimprove"`)
		writeError(w, http.StatusUnauthorized, "", "missing bearer token (Authorization: Bearer <token>)")
		return roleOpen, false
	}
	sum := sha256.Sum256([]byte(given))
	is := func(tok string, h *[32]byte) bool { return tok != "" && subtle.ConstantTimeCompare(sum[:], h[:]) == 1 }
	switch {
	case is(s.o.Token, &s.token):
		return roleOperator, true
	case is(s.o.IntakeToken, &s.intake):
		if a == intakeRead || a == intakeMutate {
			return roleIntake, true
		}
		writeError(w, http.StatusForbidden, "", "the intake token may only report outcomes and read configs (POST /api/outcomes, GET /api/agents/{agent}/config)")
	case is(s.o.ScoreToken, &s.scorer):
		if a == scoreMutate {
			return roleScore, true
		}
		writeError(w, http.StatusForbidden, "", "the score token may only post scores (POST /api/agents/{agent}/score)")
	default:
		writeError(w, http.StatusForbidden, "", "wrong token")
	}
	return roleOpen, false
}

// bearer returns the token of an "Authorization: Bearer <token>" header.
func bearer(h string) (string, bool) {
	const p = "bearer "
	if len(h) <= len(p) || !strings.EqualFold(h[:len(p)], p) {
		return "", false
	}
	return strings.TrimSpace(h[len(p):]), true
}

// isJSON reports whether a Content-Type is application/json (with any
// parameters).
func isJSON(ct string) bool {
	mt, _, _ := strings.Cut(ct, ";")
	return strings.EqualFold(strings.TrimSpace(mt), "application/json")
}

// ErrorBody is the JSON body of every error answer.
type ErrorBody struct {
	// Error says what is wrong, for a person.
	Error string `json:"error"`
	// Field names the request field (body field, query parameter or path
	// segment) that is wrong, when one is.
	Field string `json:"field,omitempty"`
	// Status repeats the HTTP status code.
	Status int `json:"status"`
}

// writeError answers with status and an ErrorBody.
func writeError(w http.ResponseWriter, status int, field, msg string) {
	writeJSON(w, status, ErrorBody{Error: msg, Field: field, Status: status})
}

// writeJSON answers with status and v as JSON.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b, _ = json.Marshal(ErrorBody{Error: "cannot encode the answer", Status: status})
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}
