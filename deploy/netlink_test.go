package deploy

import (
	"errors"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// TestListLinksRetriesInterruptedDumps: a link dump the kernel reports
// interrupted (other labs changing links meanwhile) is run again; a lasting
// interruption yields the last dump, any other error is returned.
func TestListLinksRetriesInterruptedDumps(t *testing.T) {
	one := []netlink.Link{&netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: "a"}}}
	calls := 0
	flaky := func(fails int, err error) func() ([]netlink.Link, error) {
		calls = 0
		return func() ([]netlink.Link, error) {
			calls++
			if calls <= fails {
				return nil, err
			}
			return one, nil
		}
	}
	if links, err := listLinks(flaky(3, netlink.ErrDumpInterrupted)); err != nil || len(links) != 1 || calls != 4 {
		t.Errorf("3 interrupted dumps then a good one: %d links, %v after %d calls; want 1, nil after 4", len(links), err, calls)
	}
	if _, err := listLinks(flaky(1000, netlink.ErrDumpInterrupted)); err != nil || calls != dumpRetries+1 {
		t.Errorf("always interrupted: %v after %d calls; want nil after %d", err, calls, dumpRetries+1)
	}
	if _, err := listLinks(flaky(1, unix.EPERM)); !errors.Is(err, unix.EPERM) || calls != 1 {
		t.Errorf("EPERM: %v after %d calls; want EPERM after 1", err, calls)
	}
}
