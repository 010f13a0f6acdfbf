package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/lightbearco/tupper/internal/testutil"
	"github.com/lightbearco/tupper/sdk"
)

// envDashboardScreenshot, set to a path, makes TestDashboard save a
// screenshot of the dashboard there, with a few sandboxes at work: the
// README's docs/dashboard.png is made so (see that test).
const envDashboardScreenshot = "TUPPER_DASHBOARD_SCREENSHOT"

// TestDashboard drives the web dashboard of a real `tupper serve` on runsc
// in Debian's chromium, headless, as a user would: sign in with the key,
// see a sandbox that the SDK creates appear, sign in again in another tab
// through a link that `tupper dashboard` got with no key over the local
// socket (which works once and leaves no token in the address), type `echo hi` in the sandbox's terminal and see `hi`,
// upload a file and see it listed (and in the sandbox), download it back
// byte for byte, kill the sandbox and see it go.
func TestDashboard(t *testing.T) {
	d, client, b, ctx := startDashboardTest(t)

	tab := b.tab(t)
	tab.run(t, "open the dashboard and sign in with the key",
		chromedp.Navigate(d.URL+"/dashboard/"),
		chromedp.WaitVisible(chromedp.ID("api-key")),
		chromedp.SendKeys(chromedp.ID("api-key"), d.Key),
		chromedp.Click(chromedp.CSS("form.login button[type=submit]")),
		chromedp.WaitVisible(chromedp.CSS("table#sandboxes")))

	// Created after the page is up: the list follows what runs.
	sb, err := client.Create(ctx, sdk.CreateOptions{Metadata: map[string]string{"suite": "dashboard"}})
	if err != nil {
		t.Fatalf("create a sandbox with the Go SDK: %v", err)
	}
	row := fmt.Sprintf(`tr[data-sandbox-id=%q]`, sb.ID())
	tab.run(t, "see the SDK's sandbox appear", chromedp.WaitVisible(chromedp.CSS(row)))
	tab.waitJS(t, "the sandbox's row to show it running with its metadata and time left",
		fmt.Sprintf(`(() => { const r = document.querySelector(%q); return !!r && r.textContent.includes('running') && r.textContent.includes('suite=dashboard') && /\dm/.test(r.querySelector('[data-col=left]').textContent) })()`, row))

	// Sign in through a one-time link, in a tab of its own: the
	// operator's, asked for with no key over the daemon's local socket.
	link := strings.TrimSpace(keylessCLI(t).ok(t, nil, "--root", d.Root, "dashboard"))
	if !strings.HasPrefix(link, d.URL+"/dashboard/#login=") {
		t.Fatalf("tupper dashboard printed %q, want a link to %s/dashboard/", link, d.URL)
	}
	linked := b.tab(t)
	linked.run(t, "open the sign-in link", chromedp.Navigate(link), chromedp.WaitVisible(chromedp.CSS(row)))
	where := eval[string](t, linked, `location.href`)
	stored := eval[string](t, linked, `sessionStorage.getItem('tupper.key') || ''`)
	if strings.Contains(where, "login=") || !strings.HasSuffix(where, "/dashboard/#/") {
		t.Errorf("after the sign-in link the address is %q: the token must not stay in it", where)
	}
	if !strings.HasPrefix(stored, "e2b_") || stored == d.Key {
		t.Errorf("the link's tab holds the credential %q: want a session key of its own", stored)
	}
	linked.waitJS(t, "the header to name the team the tab acts for", `document.getElementById('team').textContent === 'team default'`)

	// A link of another team, opened in the signed-in tab, switches it
	// only if the user says so: declined, the tab keeps its session and
	// team; accepted, it acts for the other team and its old session ends.
	blueKey := d.addKey(t, "--team", "blue", "--name", "dashboard-blue")
	blueLink := func() string {
		return strings.TrimSpace(newTupperCLI(t, d, blueKey).ok(t, nil, "dashboard"))
	}
	answers := make(chan bool, 2)
	asked := make(chan string, 2)
	go func() {
		for ev, err := range chromedp.Events(linked.ctx, page.JavascriptDialogOpening) {
			if err != nil {
				return
			}
			asked <- ev.Message
			chromedp.Call(linked.ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: <-answers})
		}
	}()
	for _, accept := range []bool{false, true} {
		answers <- accept
		// Opened in the tab, as a pasted link would be: the same page
		// with another fragment.
		eval[string](t, linked, fmt.Sprintf(`location.href = %q`, blueLink()))
		select {
		case msg := <-asked:
			if !strings.Contains(msg, `team "blue"`) || !strings.Contains(msg, `team "default"`) {
				t.Errorf("the question before switching teams: %q, want it to name both teams", msg)
			}
		case <-time.After(time.Minute):
			t.Fatal("a link of another team switched the signed-in tab without asking")
		}
		want := map[bool]string{false: "team default", true: "team blue"}[accept]
		linked.waitJS(t, "the header to say "+want, fmt.Sprintf(`document.getElementById('team').textContent === %q && !location.hash.includes('login=')`, want))
		now := eval[string](t, linked, `sessionStorage.getItem('tupper.key') || ''`)
		if (now == stored) == accept {
			t.Errorf("after answering %v the tab holds %q (before: %q)", accept, now, stored)
		}
	}
	if status, _, _ := d.apiKey(ctx, stored, http.MethodGet, "/v2/sandboxes", nil); status != http.StatusUnauthorized {
		t.Errorf("the session the tab gave up for team blue's still opens the API: %d, want 401", status)
	}

	again := b.tab(t)
	again.run(t, "open the used link again",
		chromedp.Navigate(link),
		chromedp.WaitVisible(chromedp.ID("api-key")))
	again.waitJS(t, "the login page to say the link was used", `document.querySelector('form.login .error').textContent.includes('used already')`)

	// The terminal: a PTY through the data plane, drawn by xterm.js.
	tab.run(t, "open the sandbox's terminal",
		chromedp.Click(chromedp.CSS(row+" a")),
		chromedp.WaitVisible(chromedp.CSS(`[data-terminal-state=ready]`)),
		chromedp.Click(chromedp.CSS(".terminal")),
		typeLine("echo hi"))
	tab.waitJS(t, "`hi` on a line of its own in the terminal",
		`[...document.querySelectorAll('.xterm-rows > div')].some(r => r.textContent.trim() === 'hi')`)

	// Files: upload into the home directory, see it, download it back.
	data := make([]byte, 300<<10)
	rand.Read(data)
	const name = "dashboard-upload.bin"
	local := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(local, data, 0o644); err != nil {
		t.Fatal(err)
	}
	fileRow := fmt.Sprintf(`#files tr[data-name=%q]`, name)
	tab.run(t, "open the file browser and upload a file",
		chromedp.Click(chromedp.CSS(`a[data-tab=files]`)),
		chromedp.WaitVisible(chromedp.CSS(`#files tbody tr`)),
		chromedp.SetUploadFiles(chromedp.ID("upload"), []string{local}),
		chromedp.WaitVisible(chromedp.CSS(fileRow)))
	home := eval[string](t, tab, `document.querySelector('.files-bar .path').value`)
	got, err := sb.Files.Read(ctx, home+"/"+name)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("the uploaded file in the sandbox: %d bytes, %v; want the %d bytes uploaded", len(got), err, len(data))
	}
	downloaded := tab.download(t, "download the file back", chromedp.Click(chromedp.CSS(fileRow+" button.download")))
	if !bytes.Equal(downloaded, data) {
		t.Errorf("downloaded %d bytes, not the %d uploaded", len(downloaded), len(data))
	}

	// The other tabs: a command the SDK started, the sandbox's log, its
	// network policy; and more time for it.
	if _, err := sb.Commands.Start(ctx, "sleep 321"); err != nil {
		t.Fatal(err)
	}
	tab.run(t, "see the SDK's command among the processes",
		chromedp.Click(chromedp.CSS(`a[data-tab=processes]`)),
		chromedp.WaitVisible(chromedp.CSS(`#processes tbody tr`)))
	tab.waitJS(t, "the sleep among the processes", `document.querySelector('#processes').textContent.includes('sleep 321')`)
	tab.run(t, "read the logs",
		chromedp.Click(chromedp.CSS(`a[data-tab=logs]`)),
		chromedp.WaitVisible(chromedp.CSS(`#logs .log-line`)))
	tab.run(t, "see the network policy", chromedp.Click(chromedp.CSS(`a[data-tab=network]`)))
	tab.waitJS(t, "the network tab to say nothing was denied", `document.querySelector('.tab-body').textContent.includes('Nothing was denied lately')`)
	before, err := client.GetInfo(ctx, sb.ID())
	if err != nil {
		t.Fatal(err)
	}
	tab.run(t, "give the sandbox five minutes more", chromedp.Click(chromedp.CSS(`.page-head button.extend`)))
	waitUntil(t, browserTimeout, "the sandbox's end to move", func() bool {
		after, err := client.GetInfo(ctx, sb.ID())
		return err == nil && after.EndAt.Sub(before.EndAt) > 4*time.Minute
	})

	// Templates and images: the daemon's base image, with its size.
	tab.run(t, "list the images",
		chromedp.Click(chromedp.CSS(`nav a[data-nav=templates]`)),
		chromedp.WaitVisible(chromedp.CSS(`#images tbody tr`)))
	tab.waitJS(t, "base among the images, with a size",
		`[...document.querySelectorAll('#images tbody tr')].some(r => r.cells[0].textContent.includes('base') && /\d (MiB|GiB)/.test(r.cells[2].textContent))`)

	// Create from the form, with options.
	tab.run(t, "create a sandbox from the form",
		chromedp.Click(chromedp.CSS(`nav a[data-nav=sandboxes]`)),
		chromedp.Click(chromedp.CSS(`details.card summary`)),
		chromedp.SendKeys(chromedp.CSS(`form.create input[name=template]`), "base"),
		chromedp.SendKeys(chromedp.CSS(`form.create textarea[name=metadata]`), "made=dashboard"),
		chromedp.SendKeys(chromedp.CSS(`form.create textarea[name=envs]`), "GREETING=hello"),
		chromedp.Click(chromedp.CSS(`form.create button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS(`#sandboxes .chip`)))
	tab.waitJS(t, "the form's sandbox in the list", `document.querySelector('#sandboxes').textContent.includes('made=dashboard')`)
	made, _, err := client.List(ctx, sdk.ListOptions{Metadata: map[string]string{"made": "dashboard"}})
	if err != nil || len(made) != 1 {
		t.Fatalf("the sandbox the form made: %v, %v", made, err)
	}
	formSB, err := client.Connect(ctx, made[0].SandboxID)
	if err != nil {
		t.Fatal(err)
	}
	if out := mustRun(ctx, t, formSB, "echo $GREETING"); out != "hello\n" {
		t.Errorf("the form's environment reached the sandbox as %q", out)
	}

	if path := os.Getenv(envDashboardScreenshot); path != "" {
		dashboardScreenshot(ctx, t, client, tab, d, path)
	}

	// Kill it from the list, with the second click the button asks for.
	tab.run(t, "kill the sandbox from the list",
		chromedp.Navigate(d.URL+"/dashboard/#/"),
		chromedp.WaitVisible(chromedp.CSS(row)),
		chromedp.Click(chromedp.CSS(row+" button.danger")),
		chromedp.WaitVisible(chromedp.CSS(row+" button.danger.armed")),
		chromedp.Click(chromedp.CSS(row+" button.danger")))
	tab.waitJS(t, "the killed sandbox's row to go", fmt.Sprintf(`!document.querySelector(%q)`, row))
	if _, err := client.GetInfo(ctx, sb.ID()); !sdk.IsNotFound(err) {
		t.Errorf("the sandbox killed in the dashboard: %v, want not found", err)
	}
	b.checkErrors(t)
}

// screenshotLoads are what the screenshot's sandboxes run, as Python: a
// CPU busy four seconds in eight, memory taken 8 MiB a second, nothing.
var screenshotLoads = []string{
	"import time\nwhile True:\n    t = time.time()\n    while time.time() - t < 4: pass\n    time.sleep(4)\n",
	"import time\nheld = []\nfor i in range(100):\n    held.append(bytearray(8 << 20))\n    time.sleep(1)\ntime.sleep(600)\n",
	"",
}

// dashboardScreenshot saves the sandboxes page with a few sandboxes more,
// two of them at work, once their CPU and memory lines have some samples.
func dashboardScreenshot(ctx context.Context, t *testing.T, client *sdk.Client, tab *browserTab, d *serveDaemon, path string) {
	t.Helper()
	for i, load := range screenshotLoads {
		sb, err := client.Create(ctx, sdk.CreateOptions{Metadata: map[string]string{"agent": fmt.Sprintf("agent-%d", i+1)}})
		if err != nil {
			t.Fatalf("create a sandbox for the screenshot: %v", err)
		}
		if load == "" {
			continue
		}
		if _, err := sb.Files.Write(ctx, "/tmp/load.py", []byte(load)); err != nil {
			t.Fatal(err)
		}
		if _, err := sb.Commands.Start(ctx, "timeout 300 python3 /tmp/load.py"); err != nil {
			t.Fatalf("start the load: %v", err)
		}
	}
	tab.run(t, "show the list", chromedp.Navigate(d.URL+"/dashboard/#/"), chromedp.WaitVisible(chromedp.CSS("table#sandboxes")))
	// The daemon samples every 5 seconds: wait for a line's worth.
	tab.waitJS(t, "sparklines with a few samples each",
		`[...document.querySelectorAll('#sandboxes tbody tr')].length >= 4 && [...document.querySelectorAll('.spark.cpu polyline')].every(p => (p.getAttribute('points') || '').split(' ').length >= 8)`)
	png, err := chromedp.Run(tab.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("take the screenshot: %v", err)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("saved a screenshot of the dashboard to %s", path)
}

// requireChromium returns the path of Debian's chromium, or skips the

// startDashboardTest starts what a dashboard test drives: a daemon with
// the dashboard built in, a Go SDK client of it, Debian's chromium, and a
// context of three minutes for the test's calls.
func startDashboardTest(t *testing.T) (*serveDaemon, *sdk.Client, *testBrowser, context.Context) {
	t.Helper()
	if testing.Short() {
		t.Skip("boots a gVisor sandbox and a browser")
	}
	chromium := requireChromium(t)
	d := startServeDaemon(t)
	requireDashboardBuilt(t, d)
	client := goClient(t, d)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return d, client, startBrowser(t, chromium), ctx
}

// test; in CI a missing browser fails it.
func requireChromium(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("chromium is not installed, and CI must run the browser tests: scripts/setup.sh installs it")
		}
		testutil.Skip(t, "chromium is not installed: apt-get install chromium (scripts/setup.sh does)")
	}
	return path
}

// requireDashboardBuilt skips the test (fails it in CI) when the daemon
// was built without the dashboard's bundle.
func requireDashboardBuilt(t *testing.T, d *serveDaemon) {
	t.Helper()
	resp, err := http.Get(d.URL + "/dashboard/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusOK:
	case resp.StatusCode == http.StatusServiceUnavailable && os.Getenv("CI") == "true":
		t.Fatal("tupper was built without the dashboard's bundle: scripts/setup.sh builds it (web/)")
	case resp.StatusCode == http.StatusServiceUnavailable:
		testutil.Skip(t, "tupper was built without the dashboard's bundle: run scripts/setup.sh (web/, npm) first")
	default:
		t.Fatalf("GET /dashboard/: %s", resp.Status)
	}
}

// testBrowser is a headless chromium with a fresh profile, whose downloads
// go to a directory of its own. What its pages log to the console, and the
// exceptions they throw, are kept for the test's log.
type testBrowser struct {
	ctx context.Context
	// downloads is where the browser saves downloads, named by their GUID.
	downloads string

	mu         sync.Mutex
	console    []string
	exceptions []string
}

// browserTimeout bounds each step of a test in the browser.
const browserTimeout = 45 * time.Second

func startBrowser(t *testing.T, chromium string) *testBrowser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.WindowSize(1280, 800),
		// Nothing may leave the machine: no QUIC, updates, sync or
		// other background traffic.
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	b := &testBrowser{ctx: bctx, downloads: t.TempDir()}
	t.Cleanup(func() {
		cancelBrowser()
		cancelAlloc()
		if t.Failed() {
			b.mu.Lock()
			t.Logf("the browser's console:\n%s", strings.Join(b.console, "\n"))
			b.mu.Unlock()
		}
	})
	_, err := chromedp.CallBrowser(bctx, browser.SetDownloadBehavior, browser.SetDownloadBehaviorParams{
		Behavior: browser.SetDownloadBehaviorBehaviorAllowAndName, DownloadPath: b.downloads, EventsEnabled: new(true),
	})
	if err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return b
}

// checkErrors fails the test for every exception a page threw.
func (b *testBrowser) checkErrors(t *testing.T) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, e := range b.exceptions {
		t.Errorf("the page threw: %s", e)
	}
}

// browserTab is one tab of a testBrowser.
type browserTab struct {
	ctx context.Context
	b   *testBrowser
}

// tab opens a new tab.
func (b *testBrowser) tab(t *testing.T) *browserTab {
	t.Helper()
	ctx, cancel := chromedp.NewContext(b.ctx)
	t.Cleanup(cancel)
	tab := &browserTab{ctx: ctx, b: b}
	messages := chromedp.Console(ctx)
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			b.mu.Lock()
			b.console = append(b.console, fmt.Sprintf("%s: %s (%s)", m.Type, m.Text, m.URL))
			if m.IsException() {
				b.exceptions = append(b.exceptions, m.Text)
			}
			b.mu.Unlock()
		}
	}()
	tab.run(t, "open a tab")
	return tab
}

// typeLine enters s in the focused element and presses Enter. The text
// arrives as one input event, as an input method gives it. Enter is a
// keydown and a keyup: the terminal takes the keydown and cancels it, after
// which a real keyboard sends no keypress, though chromedp.KeyEvent would
// (and the terminal would take it again).
func typeLine(s string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		if _, err := cdp.Call(ctx, t, input.InsertText, input.InsertTextParams{Text: s}); err != nil {
			return err
		}
		for _, ev := range kb.Encode('\r') {
			if ev.Type == kb.KeyChar {
				continue
			}
			if _, err := cdp.Call(ctx, t, input.DispatchKeyEvent, *ev); err != nil {
				return err
			}
		}
		return nil
	})
}

// fail fails the test for step what, with what the page shows.
func (tab *browserTab) fail(t *testing.T, what string, err error) {
	t.Helper()
	if errors.Is(err, context.DeadlineExceeded) {
		err = fmt.Errorf("not done within %v", browserTimeout)
	}
	body, _ := chromedp.Run(tab.ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText : ''`))
	t.Fatalf("%s: %v\nthe page shows:\n%s", what, err, body)
}

// run runs steps in the tab, failing the test with what after
// browserTimeout.
func (tab *browserTab) run(t *testing.T, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(tab.ctx, browserTimeout)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		tab.fail(t, what, err)
	}
}

// eval returns the value of the JavaScript expression expr in the tab.
func eval[T any](t *testing.T, tab *browserTab, expr string) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(tab.ctx, browserTimeout)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		tab.fail(t, "evaluate "+expr, err)
	}
	return v
}

// waitJS waits until the JavaScript expression cond is true in the tab.
func (tab *browserTab) waitJS(t *testing.T, what, cond string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(tab.ctx, browserTimeout)
	defer cancel()
	_, err := chromedp.Run(ctx, chromedp.Poll[bool](cond,
		chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(browserTimeout)))
	if err != nil {
		tab.fail(t, "wait for "+what, err)
	}
}

// download runs step, which must start a download, and returns the
// downloaded file's bytes.
func (tab *browserTab) download(t *testing.T, what string, step chromedp.Action[chromedp.Void]) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(tab.ctx, browserTimeout)
	defer cancel()
	progress := chromedp.BrowserEvents(ctx, browser.DownloadProgress)
	tab.run(t, what, step)
	for ev, err := range progress {
		if err != nil {
			tab.fail(t, what, err)
		}
		switch ev.State {
		case browser.DownloadProgressStateCompleted:
			data, err := os.ReadFile(filepath.Join(tab.b.downloads, ev.GUID))
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			return data
		case browser.DownloadProgressStateCanceled:
			t.Fatalf("%s: the browser cancelled the download", what)
		}
	}
	return nil
}
