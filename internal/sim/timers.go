package sim

import (
	"container/heap"
	"time"
)

// timer is a timer catch event waiting for its due date.
type timer struct {
	due   time.Time
	elem  *elementInstance
	index int // in the partition's timer heap; -1 once out of it
}

// timerHeap orders waiting timers by due date: the due check looks at the
// earliest only, however many instances wait.
type timerHeap []*timer

func (h timerHeap) Len() int           { return len(h) }
func (h timerHeap) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h timerHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}

func (h *timerHeap) Push(x any) {
	tm := x.(*timer)
	tm.index = len(*h)
	*h = append(*h, tm)
}

func (h *timerHeap) Pop() any {
	old := *h
	tm := old[len(old)-1]
	old[len(old)-1] = nil
	tm.index = -1
	*h = old[:len(old)-1]
	return tm
}

// scheduleTimer starts a timer catch event's wait. Zeebe gives the timer a
// key of its own, so the keys that follow are those a real partition
// would issue.
func (p *partition) scheduleTimer(ei *elementInstance) {
	p.keys.next()
	tm := &timer{due: now().Add(ei.el.TimerDuration), elem: ei}
	heap.Push(&p.state.timers, tm)
	ei.timer = tm
}

// cancelTimer withdraws a waiting timer (instance cancelled). One already
// due has left the heap and its trigger finds it cancelled.
func (p *partition) cancelTimer(ei *elementInstance) {
	if tm := ei.timer; tm.index >= 0 {
		heap.Remove(&p.state.timers, tm.index)
	}
	ei.timer = nil
}

// triggerTimer is Zeebe's TIMER TRIGGER command: the catch event completes
// and its token moves on.
func (p *partition) triggerTimer(tm *timer) {
	ei := tm.elem
	if ei.timer != tm {
		return // cancelled after it fell due
	}
	ei.timer = nil
	p.leave(ei)
}

// requestCheck asks the processing goroutine for a due check before its
// next record.
func (p *partition) requestCheck() {
	p.checkRequested.Store(true)
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// checkDue is the partition's due-date check, run between records every
// TimerInterval. Like Zeebe's checkers it is no record itself and writes
// none while nothing is due: what is due becomes a command on the log,
// queued and paid for like any other record.
func (p *partition) checkDue() {
	t := now()
	for len(p.state.timers) > 0 && !t.Before(p.state.timers[0].due) {
		tm := heap.Pop(&p.state.timers).(*timer)
		_ = p.enqueue(classInternal, func() { p.triggerTimer(tm) })
	}
	if !p.state.expiryQueued && p.expiryDue(t) {
		p.state.expiryQueued = true
		_ = p.enqueue(classInternal, p.expireDue)
	}
}
