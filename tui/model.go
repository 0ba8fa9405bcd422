// Package tui is `shardctl top`: Bubble Tea models that draw the signal
// model of internal/signals — the scissors, the queue and the latency
// heatmap of every shard, with the advisor's level and reason. It asks for
// snapshots through the Fetch function it is given and never queries by
// itself, so what top shows and what `shardctl signals` decides are the
// same numbers. It imports only the model (internal/architecture checks).
package tui

import (
	"context"
	"strings"
	"time"

	"charm.land/bubbles/v2/help"
	"charm.land/bubbles/v2/key"
	"charm.land/bubbles/v2/textinput"
	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/ansi"

	"github.com/shardctl/shardctl/internal/signals"
)

// Options of the dashboard.
type Options struct {
	// Fetch returns a fresh snapshot; the model calls it off the UI loop,
	// one call at a time.
	Fetch func(ctx context.Context) (signals.Snapshot, error)
	// Refresh is how often to fetch (default 2 s).
	Refresh time.Duration
	// Source describes where the numbers come from, for the header.
	Source string
	// Window is how far back the pictures reach.
	Window time.Duration
	// Now is the clock (tests fix it).
	Now func() time.Time
	// Note, when set, is a line of what happens beside the numbers (the
	// demo's scenario: "load raised to 80 instances/s"), read at each
	// snapshot and shown above the status line.
	Note func() string
}

type view int

const (
	overview view = iota
	detail
	helpView
)

type sortKey int

const (
	byName sortKey = iota
	byLevel
	byRatio
	byQueue
	sortKeys
)

func (k sortKey) String() string {
	return [...]string{"name", "level", "ratio", "queue"}[k]
}

type keyMap struct {
	Up, Down, Enter, Back, Help, Filter, Sort, Pause, Quit key.Binding
}

func (k keyMap) ShortHelp() []key.Binding {
	return []key.Binding{k.Enter, k.Filter, k.Sort, k.Pause, k.Help, k.Quit}
}

func (k keyMap) FullHelp() [][]key.Binding {
	return [][]key.Binding{{k.Up, k.Down, k.Enter, k.Back}, {k.Filter, k.Sort, k.Pause}, {k.Help, k.Quit}}
}

var keys = keyMap{
	Up:     key.NewBinding(key.WithKeys("up", "k"), key.WithHelp("↑/k", "up")),
	Down:   key.NewBinding(key.WithKeys("down", "j"), key.WithHelp("↓/j", "down")),
	Enter:  key.NewBinding(key.WithKeys("enter"), key.WithHelp("enter", "detail")),
	Back:   key.NewBinding(key.WithKeys("esc", "backspace"), key.WithHelp("esc", "back")),
	Help:   key.NewBinding(key.WithKeys("?"), key.WithHelp("?", "help")),
	Filter: key.NewBinding(key.WithKeys("/"), key.WithHelp("/", "filter")),
	Sort:   key.NewBinding(key.WithKeys("s"), key.WithHelp("s", "sort")),
	Pause:  key.NewBinding(key.WithKeys("p"), key.WithHelp("p", "pause")),
	Quit:   key.NewBinding(key.WithKeys("q", "ctrl+c"), key.WithHelp("q", "quit")),
}

// Model is the dashboard.
type Model struct {
	opts          Options
	width, height int
	view          view
	selected      int
	sort          sortKey
	paused        bool
	blurred       bool

	filtering bool
	filter    textinput.Model
	help      help.Model

	snap     *signals.Snapshot
	note     string
	fetching bool
	lastOK   time.Time
	err      error
	failures int
	// frame changes whenever what is drawn may change; View reuses the last
	// drawing otherwise.
	frame, drawnFrame int
	drawn             string
}

type (
	tickMsg     struct{}
	snapshotMsg struct {
		snap signals.Snapshot
		err  error
	}
)

// New builds the dashboard.
func New(opts Options) *Model {
	if opts.Refresh <= 0 {
		opts.Refresh = 2 * time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	ti := textinput.New()
	ti.Prompt = "/"
	ti.Placeholder = "shard name"
	return &Model{opts: opts, filter: ti, help: help.New(), width: 80, height: 24, drawnFrame: -1}
}

// Init fetches the first snapshot at once.
func (m *Model) Init() tea.Cmd { return m.fetch() }

func (m *Model) fetch() tea.Cmd {
	if m.fetching {
		return nil
	}
	m.fetching = true
	fetch := m.opts.Fetch
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		snap, err := fetch(ctx)
		return snapshotMsg{snap, err}
	}
}

// next schedules the next fetch: the refresh, slower while the terminal
// is not focused, and backing off (up to 30 s) while fetches fail.
func (m *Model) next() tea.Cmd {
	return tea.Tick(m.delay(), func(time.Time) tea.Msg { return tickMsg{} })
}

func (m *Model) delay() time.Duration {
	d := m.opts.Refresh
	if m.blurred {
		d *= 4
	}
	if m.failures > 0 {
		d = min(d<<min(m.failures, 4), 30*time.Second)
	}
	return d
}

// Update handles keys, sizes, focus and snapshots.
func (m *Model) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case tea.WindowSizeMsg:
		m.width, m.height = msg.Width, msg.Height
		m.help.SetWidth(msg.Width)
		m.frame++
	case tea.FocusMsg:
		m.blurred = false
	case tea.BlurMsg:
		m.blurred = true
	case tickMsg:
		if m.paused {
			return m, m.next()
		}
		return m, m.fetch()
	case snapshotMsg:
		m.fetching = false
		if msg.err != nil {
			m.err = msg.err
			m.failures++
		} else {
			s := msg.snap
			m.snap, m.err, m.failures, m.lastOK = &s, nil, 0, m.opts.Now()
		}
		if m.opts.Note != nil {
			m.note = m.opts.Note()
		}
		m.frame++
		return m, m.next()
	case tea.KeyPressMsg:
		m.frame++
		return m, m.key(msg)
	}
	return m, nil
}

func (m *Model) key(msg tea.KeyPressMsg) tea.Cmd {
	if m.filtering {
		switch msg.String() {
		case "enter":
			m.filtering = false
			m.filter.Blur()
			return nil
		case "esc":
			m.filtering = false
			m.filter.Blur()
			m.filter.SetValue("")
			return nil
		}
		var cmd tea.Cmd
		m.filter, cmd = m.filter.Update(msg)
		m.selected = 0
		return cmd
	}
	switch {
	case key.Matches(msg, keys.Quit):
		return tea.Quit
	case key.Matches(msg, keys.Help):
		if m.view == helpView {
			m.view = overview
		} else {
			m.view = helpView
		}
	case key.Matches(msg, keys.Back):
		m.view = overview
	case key.Matches(msg, keys.Enter):
		if m.view == overview && len(m.rows()) > 0 {
			m.view = detail
		}
	case key.Matches(msg, keys.Up):
		m.selected = max(m.selected-1, 0)
	case key.Matches(msg, keys.Down):
		m.selected = min(m.selected+1, max(len(m.rows())-1, 0))
	case key.Matches(msg, keys.Filter):
		m.filtering = true
		m.view = overview
		return m.filter.Focus()
	case key.Matches(msg, keys.Sort):
		m.sort = (m.sort + 1) % sortKeys
	case key.Matches(msg, keys.Pause):
		m.paused = !m.paused
	}
	return nil
}

// View draws the current screen; an unchanged frame is not drawn again.
func (m *Model) View() tea.View {
	if m.frame != m.drawnFrame {
		m.drawn, m.drawnFrame = m.render(), m.frame
	}
	v := tea.NewView(m.drawn)
	v.AltScreen = true
	v.ReportFocus = true
	v.WindowTitle = "shardctl top"
	return v
}

// Render draws the screen as text, at the model's size.
func (m *Model) render() string {
	var body string
	switch {
	case m.view == helpView:
		body = m.renderHelp()
	case m.view == detail:
		body = m.renderDetail()
	default:
		body = m.renderOverview()
	}
	lines := strings.Split(body, "\n")
	// Fill the screen exactly: the status line is always the last, the
	// note (when there is one) above it.
	h := max(m.height-1, 1)
	if m.note != "" {
		h = max(h-1, 1)
	}
	if len(lines) > h {
		lines = lines[:h]
	}
	for len(lines) < h {
		lines = append(lines, "")
	}
	for i, l := range lines {
		if ansi.StringWidth(l) > m.width {
			lines[i] = ansi.Truncate(l, m.width, "…")
		}
	}
	if m.note != "" {
		lines = append(lines, ansi.Truncate(styleFaint.Render(m.note), m.width, "…"))
	}
	return strings.Join(append(lines, m.statusLine()), "\n")
}
