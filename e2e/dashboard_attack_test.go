package e2e

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/lightbearco/tupper/sdk"
)

// TestDashboardAttacks shows the web dashboard, in Debian's chromium, what
// code in a sandbox controls: metadata, file and directory names, a
// symlink's target, a process's command line, tag and directory, and what
// it prints in the terminal. Markup in any of them must show as text and
// never become part of the page; a link the terminal prints (OSC 8) to a
// javascript: URL must not be followed when clicked (a web link is, after
// the user says yes).
func TestDashboardAttacks(t *testing.T) {
	d, client, b, ctx := startDashboardTest(t)

	// Each payload, if it became markup, would leave an element of class
	// pwn behind (and try to run code, which the page's policy would stop
	// too: the elements are what tells).
	payload := func(n int) string {
		return fmt.Sprintf(`<img class=pwn src=/pwn%d onerror="localStorage.pwned=%d"><b class=pwn>%d</b>`, n, n, n)
	}
	sb, err := client.Create(ctx, sdk.CreateOptions{Metadata: map[string]string{payload(1): payload(2)}})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	home := strings.TrimSpace(mustRun(ctx, t, sb, "echo -n $HOME"))
	dir := home + "/" + strings.ReplaceAll(payload(3), "/", "_")
	if _, err := sb.Files.MakeDir(ctx, dir); err != nil {
		t.Fatalf("mkdir: %v", err)
	}
	name := strings.ReplaceAll(payload(4), "/", "_")
	if _, err := sb.Files.Write(ctx, home+"/"+name, []byte("x")); err != nil {
		t.Fatalf("write: %v", err)
	}
	mustRun(ctx, t, sb, fmt.Sprintf("ln -s %q ~/link", payload(5)))
	if _, err := sb.Commands.Start(ctx, fmt.Sprintf("sleep 600 # %s", payload(6)), sdk.WithTag(payload(7)), sdk.WithCwd(dir)); err != nil {
		t.Fatalf("start a process: %v", err)
	}

	tab := b.tab(t)
	// Dialogs (the terminal's "navigate to …?") are accepted, as a user
	// who clicks through would.
	var (
		mu    sync.Mutex
		asked []string
	)
	dialogs := chromedp.Events(tab.ctx, page.JavascriptDialogOpening)
	go func() {
		for ev, err := range dialogs {
			if err != nil {
				return
			}
			mu.Lock()
			asked = append(asked, ev.Message)
			mu.Unlock()
			chromedp.Call(tab.ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true})
		}
	}()
	row := fmt.Sprintf(`tr[data-sandbox-id=%q]`, sb.ID())
	tab.run(t, "sign in",
		chromedp.Navigate(d.URL+"/dashboard/"),
		chromedp.WaitVisible(chromedp.ID("api-key")),
		chromedp.SendKeys(chromedp.ID("api-key"), d.Key),
		chromedp.Click(chromedp.CSS("form.login button[type=submit]")),
		chromedp.WaitVisible(chromedp.CSS(row)))
	shows := func(where string, ns ...int) {
		t.Helper()
		for _, n := range ns {
			tab.waitJS(t, fmt.Sprintf("payload %d as text on %s", n, where),
				fmt.Sprintf(`document.body.textContent.includes(%q)`, payload(n)))
		}
		if got := eval[int](t, tab, `document.querySelectorAll('.pwn').length`); got != 0 {
			t.Errorf("%s: %d elements of the sandbox's markup are in the page", where, got)
		}
	}
	shows("the list", 1, 2)

	tab.run(t, "open the sandbox's files", chromedp.Navigate(d.URL+"/dashboard/#/sandboxes/"+sb.ID()+"/files"),
		chromedp.WaitVisible(chromedp.CSS(`#files tbody tr`)))
	tab.waitJS(t, "the file list", `!!document.querySelector('#files tr[data-name="link"]')`)
	for _, n := range []string{strings.ReplaceAll(payload(3), "/", "_") + "/", name, payload(5)} {
		tab.waitJS(t, "a name as text in the file list", fmt.Sprintf(`document.querySelector('#files').textContent.includes(%q)`, n))
	}
	shows("the sandbox's page", 1, 2)

	tab.run(t, "open the processes", chromedp.Click(chromedp.CSS(`a[data-tab=processes]`)),
		chromedp.WaitVisible(chromedp.CSS(`#processes tbody tr`)))
	shows("the processes", 6, 7)

	// The terminal: a link to a javascript: URL, clicked, and one to a
	// web address (a closed port of this host), clicked to show that a
	// click reaches the terminal's links.
	tab.run(t, "open the terminal and print two links",
		chromedp.Click(chromedp.CSS(`a[data-tab=terminal]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-terminal-state=ready]`)),
		chromedp.Click(chromedp.CSS(".terminal")),
		typeLine(`printf '\e]8;;javascript:localStorage.pwned=8\a%s\e]8;;\a\n\e]8;;http://127.0.0.1:1/osc8\a%s\e]8;;\a\n' JS-LINK WEB-LINK`))
	click := func(label string) []string {
		t.Helper()
		tab.waitJS(t, label+" in the terminal",
			fmt.Sprintf(`[...document.querySelectorAll('.xterm-rows > div')].some(r => r.textContent.trim() === %q)`, label))
		where := eval[[]float64](t, tab, fmt.Sprintf(`(() => {
			const r = [...document.querySelectorAll('.xterm-rows > div')].find(r => r.textContent.trim() === %q)
			const box = r.getBoundingClientRect()
			return [box.left + 20, box.top + box.height / 2]
		})()`, label))
		x, y := where[0], where[1]
		mu.Lock()
		asked = nil
		mu.Unlock()
		// The terminal finds a link as the mouse moves over it, and
		// follows it when a click starts and ends on it.
		tab.run(t, "click "+label,
			chromedp.MouseEvent(chromedp.MouseMoved, x-10, y),
			chromedp.MouseEvent(chromedp.MouseMoved, x, y),
			chromedp.Sleep(300*time.Millisecond),
			chromedp.MouseClickXY(x, y),
			chromedp.Sleep(time.Second))
		mu.Lock()
		defer mu.Unlock()
		return asked
	}
	if got := click("JS-LINK"); len(got) != 0 {
		t.Errorf("the terminal offered to follow a javascript: link: %q", got)
	}
	if got := click("WEB-LINK"); len(got) != 1 || !strings.Contains(got[0], "http://127.0.0.1:1/osc8") {
		t.Errorf("clicking the terminal's web link asked %q, want the question about http://127.0.0.1:1/osc8: clicks do not reach the links, and the javascript: one was not tried", got)
	}
	if got := eval[string](t, tab, `localStorage.getItem('pwned') || ''`); got != "" {
		t.Errorf("the sandbox's markup or link ran code in the dashboard's origin: payload %s", got)
	}
	b.checkErrors(t)
}
