package rawsock

import "time"

// Expired is a deadline long past: set on a connection, it ends a read
// waiting in the poller at once (with os.ErrDeadlineExceeded).
var Expired = time.Unix(1, 0)
