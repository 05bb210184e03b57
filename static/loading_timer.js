// Ends the frame loop that Gradio's loading screen leaves running for as long as the page is open.
//
// Gradio 6's status tracker (statustracker-*.js) counts the seconds an event has been pending in a loop on
// requestAnimationFrame: each frame's callback asks for the next while the tracker's status is "pending", and
// the loop stops when the tracker sees its status change. The page's loading screen is such a tracker, and
// Gradio removes it while its status is still "pending" (it is shown only until the app has rendered), so its
// loop never sees a change: it asks for a frame 60 times a second until the tab closes. On this app's page
// (2-core machine) that kept an idle tab's browser at 0.07-0.09 core (0.008-0.012 without the loop), and a Step
// on the Residual tab cost the renderer's main thread 49-54 ms of tasks (40-45 without).
//
// This wraps window.requestAnimationFrame before Gradio's modules load (the tracker keeps the function it finds
// when its module loads). A frame that the status tracker asks for while the page has no component yet (the
// loading screen's tracker is then the only one) starts that tracker's loop, and a frame that the tracker asks
// for from inside its loop's callback continues it; the loop's frames stop once the tracker's element has left
// the document. Every other frame is asked for as before. Who asked is read from a stack trace, and only while
// the page has no component or while that loop runs. Loaded first in the page's <head>
// (inspector/ui/page_head.py).
(() => {
  if (window.iiLoadingTimer) return;
  const request = window.requestAnimationFrame.bind(window);
  const TRACKER = '[data-testid="status-tracker"]';
  let running = null;  // the loading screen's tracker, while a frame callback of its loop runs
  // what it did, for tests: the loops it tied to the loading screen, and those it ended
  const seen = window.iiLoadingTimer = { tied: 0, ended: 0 };

  // Whether the function that asked for a frame comes from Gradio's status tracker module (the stack line below
  // this wrapper's own; Chrome writes "at name (url:line:col)", Firefox and Safari "name@url:line:col").
  const askedByTracker = () => {
    const lines = (new Error().stack || "").split("\n");
    const own = lines.findIndex((line) => line.includes("iiRequestFrame"));
    return own >= 0 && /\/statustracker[^/]*\.js/.test(lines[own + 1] || "");
  };

  // The loading screen's tracker, while it is the page's only tracker and no component has been drawn yet
  // (after that, never again: no DOM query once the page has a component).
  let loading = true;
  const loadingScreen = () => {
    if (!loading) return null;
    if (document.querySelector(".block")) {
      loading = false;
      return null;
    }
    const trackers = document.querySelectorAll(TRACKER);
    return trackers.length === 1 ? trackers[0] : null;
  };

  // The loading screen's tracker if the frame asked for now is its loop's. Its first frame may be asked for from
  // inside another frame's callback (it was, with Gradio 6.31); inside its own loop's callback, only the
  // tracker's requests continue the loop.
  const tiedTracker = () => {
    if (running) return askedByTracker() ? running : null;
    const tracker = loadingScreen();
    if (tracker && askedByTracker()) {
      seen.tied += 1;
      return tracker;
    }
    return null;
  };

  window.requestAnimationFrame = function iiRequestFrame(callback) {
    const tracker = tiedTracker();
    if (!tracker) return request(callback);
    return request((time) => {
      if (!tracker.isConnected) {  // the loop asks for no frame again
        seen.ended += 1;
        return;
      }
      running = tracker;
      try {
        callback(time);
      } finally {
        running = null;
      }
    });
  };
})();
