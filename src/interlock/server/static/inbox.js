// The inbox page: follow /inbox/stream, fetch each changed request's card, post answers
// with fetch. Cards are always rendered by the server; this file only places them.
(() => {
  "use strict";

  const FRAGMENT = { "X-Interlock-Fragment": "1" };
  const SETTLED = ["answered", "rejected", "expired", "cancelled"];
  const $ = (id) => document.getElementById(id);

  // Times. The server writes each as <time datetime="2026-12-07T23:05:00Z">2026-12-07 23:05
  // UTC</time>, right as it stands where this script does not run. Here each reads in the
  // reader's own time zone and manner ("Dec 8, 00:05", "Dec 7, 3:05 PM"; the year only when
  // it is not this one), and says in its title the full date, time and zone, and UTC.
  // Every page's times are made local as it loads, and every fragment's as it is parsed
  // (`fromHTML`, a run's page read again), before it is placed or read out.

  // The hour padded or not as the locale's own short time has it, "01:05" in Britain and
  // "1:05 AM" in the US: asked for with the month and day, some locales drop the padding.
  const oneAm = new Intl.DateTimeFormat(undefined, { timeStyle: "short", timeZone: "UTC" }).formatToParts(Date.UTC(2000, 0, 1, 1));
  const hour = oneAm.find((p) => p.type === "hour")?.value.length === 2 ? "2-digit" : "numeric";
  const SHORT = { month: "short", day: "numeric", hour, minute: "2-digit" };
  const shortTime = new Intl.DateTimeFormat(undefined, SHORT);
  const shortDate = new Intl.DateTimeFormat(undefined, { ...SHORT, year: "numeric" });
  const fullTime = new Intl.DateTimeFormat(undefined, { dateStyle: "full", timeStyle: "long" });
  function localTimes(root) {
    const year = new Date().getFullYear();
    for (const t of root.querySelectorAll("time[datetime]:not([title])")) {  // a title: made local already
      const when = new Date(t.dateTime);
      if (Number.isNaN(when.getTime())) continue;  // left as the server wrote it
      t.title = `${fullTime.format(when)} (${t.textContent.trim()})`;
      t.textContent = (when.getFullYear() === year ? shortTime : shortDate).format(when);
    }
  }
  localTimes(document);

  // The history's From and To are days in the reader's own time zone, sent with the form
  // (its `tz`): the server reads them in UTC without it. A page whose dates were read so
  // (a link without `tz`) keeps saying so.
  const zone = $("h-tz");
  const here = Intl.DateTimeFormat().resolvedOptions().timeZone;
  if (zone && !zone.value && here && !$("h-from").value && !$("h-to").value) {
    zone.value = here;
    $("h-days").textContent = `Days in ${here}`;
  }

  function fromHTML(html) {
    const template = document.createElement("template");
    template.innerHTML = html.trim();
    localTimes(template.content);
    return template.content.firstElementChild;
  }

  // -- forms ----------------------------------------------------------------------------

  // `live`: on the inbox, answers and claims are posted with fetch and cards placed; on
  // another page (a request's own) the forms post as they are, with the same helpers.
  function wire(root, live = true) {
    if (live) for (const form of root.querySelectorAll("form.claim-form")) form.addEventListener("submit", claim);
    for (const form of root.querySelectorAll("form.answer")) {
      if (live) form.addEventListener("submit", submit);
      // Typing an "other" answer picks the Other option; emptying it takes the pick back
      // to the option picked before typing began (else "Leave unanswered", where the ask
      // is optional, else none).
      for (const radio of form.querySelectorAll("input[data-other]")) {
        const text = radio.closest(".other").querySelector("input[type=text]");
        const set = radio.closest("fieldset");
        const none = set.querySelector("input[data-unanswered]");
        let before = null;  // the option picked when the typing began
        text.addEventListener("input", () => {
          if (text.value.trim() !== "") {
            if (!radio.checked) before = set.querySelector("input[type=radio]:checked");
            radio.checked = true;
          } else if (radio.checked) {
            const back = before || none;
            if (back) back.checked = true;
            else radio.checked = false;
          }
        });
      }
      // Multi-choice: at most `max` boxes can be ticked, at least `min` must be.
      for (const set of form.querySelectorAll("fieldset[data-min]")) {
        const boxes = [...set.querySelectorAll("input[type=checkbox]")];
        const min = Number(set.dataset.min || 0);
        const max = set.dataset.max ? Number(set.dataset.max) : Infinity;
        const limit = () => {
          const n = boxes.filter((b) => b.checked).length;
          for (const b of boxes) b.disabled = !b.checked && n >= max;
          boxes[0].setCustomValidity(n < min ? `Pick at least ${min}.` : "");
        };
        set.addEventListener("change", limit);
        limit();
      }
      // Ctrl+Enter in a multi-line answer sends it (not in an approval's reason).
      if (!form.hasAttribute("data-approval")) {
        form.addEventListener("keydown", (e) => {
          if (e.key === "Enter" && (e.ctrlKey || e.metaKey) && e.target.tagName === "TEXTAREA") {
            e.preventDefault();
            form.requestSubmit(form.querySelector("button[value=answer]"));
          }
        });
      }
    }
  }

  async function submit(event) {
    event.preventDefault();
    const form = event.currentTarget;
    const body = new URLSearchParams(new FormData(form, event.submitter));
    const buttons = form.querySelectorAll("button:not([data-guard])");
    // Disabling the pressed button takes the focus off it: note that it was in this card,
    // so that `leave` puts it on the next card rather than back at the top of the page.
    if (form.closest("li").contains(document.activeElement)) form.closest("li").dataset.focused = "true";
    for (const b of buttons) b.disabled = true;
    form.setAttribute("aria-busy", "true");
    let response;
    try {
      response = await fetch(form.getAttribute("action"), { method: "POST", body, headers: FRAGMENT, credentials: "same-origin" });
    } catch {
      return formError(form, buttons, "Could not reach the server. Try again.");
    }
    const text = await response.text();
    const el = fromHTML(text);
    if (!el || el.dataset.status === "error") {
      return formError(form, buttons, el ? el.textContent : refusal(response.status, text));
    }
    const card = form.closest("li");
    if (el.dataset.status === "pending") {  // refused: the card again, with the fault shown
      card.replaceWith(el);
      wire(el);
      const bad = el.querySelector(".invalid input, .invalid textarea, .invalid select, [aria-invalid=true]");
      (bad || el.querySelector("h3")).focus();
      return;
    }
    place(el);
    const notice = el.querySelector(".notice");
    say(notice ? notice.textContent : `${el.querySelector(".outcome").textContent}.`);
  }

  // Claim or give up a claim: the server answers with the card; only its claim part is
  // taken, so an answer being typed in the same card is kept.
  async function claim(event) {
    event.preventDefault();
    const form = event.currentTarget;
    const card = form.closest("li");
    const body = new URLSearchParams(new FormData(form, event.submitter));
    const focused = form.contains(document.activeElement);  // before disabling takes it away
    for (const b of form.querySelectorAll("button:not([data-guard])")) b.disabled = true;
    let el = null;
    try {
      const response = await fetch(form.getAttribute("action"), { method: "POST", body, headers: FRAGMENT, credentials: "same-origin" });
      el = fromHTML(await response.text());
    } catch {
      el = null;
    }
    const part = el && el.querySelector(".claim");
    if (!part) {
      for (const b of form.querySelectorAll("button:not([data-guard])")) b.disabled = false;
      return say("Could not claim the request. Try again.");
    }
    // The card's claim part as it is now: the stream may have replaced this form meanwhile.
    swapClaim(card.querySelector(".claim"), part, focused);
    const notice = part.querySelector(".notice");
    say(notice ? notice.textContent : part.querySelector(".claim-state").textContent.replace(/\s+/g, " ").trim());
  }

  // The focus, if it was in the old part, goes to the new part's button (or, with none
  // left, to the card's heading) rather than back to the top of the page.
  function swapClaim(old, part, focused = old.contains(document.activeElement)) {
    const card = old.closest("li");
    old.replaceWith(part);
    wire(part);
    if (focused) (part.querySelector("button") || card.querySelector("h3")).focus();
  }

  // What a refusal that is no card says (a proxy's page, or the API's problem details:
  // an answer over the size limit is refused before any route reads it).
  function refusal(status, text) {
    let detail = "";
    try {
      detail = JSON.parse(text).detail || "";
    } catch {
      detail = "";
    }
    if (status === 413) return `Too large to send${detail ? `: ${detail}` : ""}. Shorten the answer and send it again.`;
    return detail ? `The server refused it: ${detail}.` : `The server answered ${status}.`;
  }

  function formError(form, buttons, message) {
    delete form.closest("li").dataset.focused;
    for (const b of buttons) b.disabled = false;
    form.removeAttribute("aria-busy");
    const slot = form.querySelector(".form-error");
    slot.textContent = message;
    slot.hidden = false;
  }

  // -- placing cards --------------------------------------------------------------------

  const pending = $("pending");
  const history = $("history");
  const updates = $("updates");

  function say(text) {
    $("live").textContent = text;
  }

  function counts() {
    const n = pending.children.length;
    const more = "more" in $("pending-count").dataset ? "+" : "";  // others wait on another page
    $("pending-count").textContent = `${n}${more}`;
    $("pending-empty").hidden = n > 0;
    $("history-empty").hidden = history.children.length > 0;
    document.title = `${n ? `(${n}${more}) ` : ""}Inbox · interlock`;
  }

  // Put a card where its state says: pending ones newest first, settled ones on top of
  // the history. A pending card already shown is left alone, so typing is not lost.
  function place(el) {
    const old = document.getElementById(el.id);
    if (el.dataset.status === "pending") {
      if (old) return false;
      const later = [...pending.children].find((c) => c.dataset.id < el.dataset.id);
      // An older page shows no request newer than its own: a new one is the first page's.
      if ("paged" in pending.dataset && (!later || later === pending.firstElementChild)) return false;
      wire(el);
      pending.insertBefore(el, later || null);
    } else {
      if (old && old.parentElement === pending) leave(old);
      else if (old) old.remove();
      history.prepend(el);
    }
    counts();
    return true;
  }

  // Remove a pending card, keeping keyboard focus nearby if it was inside.
  function leave(card) {
    const focused = card.contains(document.activeElement) || card.dataset.focused === "true";
    const next = card.nextElementSibling || card.previousElementSibling;
    card.remove();
    if (focused) (next ? next.querySelector("h3") : $("pending-h")).focus();
  }

  async function fetchCard(url) {
    const response = await fetch(url, { headers: FRAGMENT, credentials: "same-origin" });
    return response.ok ? fromHTML(await response.text()) : null;
  }

  // -- the live stream ------------------------------------------------------------------

  function follow() {
    const base = document.body.dataset.base;
    const source = new EventSource(document.body.dataset.stream);
    let queue = Promise.resolve();  // one event at a time, in order
    const later = (work) => { queue = queue.then(work).catch((e) => console.error(e)); };

    const onRequest = (event) => later(async () => {
      const { request_id: id } = JSON.parse(event.data);
      const el = await fetchCard(new URL(`inbox/requests/${encodeURIComponent(id)}`, base));
      // Looked at once the card is here: an answer sent from this page meanwhile has placed
      // it and said so already.
      const wasPending = Boolean(pending.querySelector(`[data-id="${CSS.escape(id)}"]`));
      if (!el || !place(el)) return;
      const title = el.querySelector("h3, .item-title").textContent;
      if (el.dataset.status === "pending") say(`New request: ${title}`);
      else if (wasPending) say(`${title}: ${el.querySelector(".outcome").textContent.toLowerCase()}.`);
    });
    // A claim changes only the claim part of a pending card (what is typed stays).
    const onClaim = (event) => later(async () => {
      const { request_id: id } = JSON.parse(event.data);
      const card = document.getElementById(`req-${id}`);
      const old = card && card.dataset.status === "pending" ? card.querySelector(".claim") : null;
      if (!old) return;
      const el = await fetchCard(new URL(`inbox/requests/${encodeURIComponent(id)}`, base));
      const part = el && el.querySelector(".claim");
      if (part && part.dataset.claimedBy !== old.dataset.claimedBy) swapClaim(old, part);
    });
    source.addEventListener("claimed", onClaim);
    source.addEventListener("unclaimed", onClaim);
    source.addEventListener("created", onRequest);
    for (const type of SETTLED) source.addEventListener(type, onRequest);

    source.addEventListener("informed", (event) => later(async () => {
      const { id } = JSON.parse(event.data);
      const el = await fetchCard(new URL(`inbox/updates/${id}`, base));
      if (!el || document.getElementById(el.id)) return;
      updates.prepend(el);
      $("updates-section").hidden = false;
      say(`Update: ${el.querySelector("p").textContent}`);
    }));

    // After "dropped" the server ends the stream and the browser reconnects with
    // Last-Event-ID, so the missed events are replayed.
    source.addEventListener("error", () => {
      const closed = source.readyState === EventSource.CLOSED;
      document.body.dataset.live = closed ? "closed" : "reconnecting";
      $("offline").hidden = !closed;
    });
    source.addEventListener("open", () => { document.body.dataset.live = "open"; });
  }

  // What cannot be undone (cancelling a run) asks first, on any page.
  function confirming(root) {
    for (const form of root.querySelectorAll("form[data-confirm]")) {
      form.addEventListener("submit", (e) => {
        if (!window.confirm(form.dataset.confirm)) e.preventDefault();
      });
    }
  }
  confirming(document);

  if (pending) {
    wire(document);
    counts();
    follow();
  } else {
    wire(document, false);  // a request's page: Ctrl+Enter and the multi-choice limits, as in the inbox
    followOne();
    followRun();
  }

  // A run's page, while the run goes on: it reads itself again on each of the run's
  // events (a request answered, the run resumed, ended), so its status, requests and
  // events are as they are now. A message being written to the agent is kept, with its
  // focus; the stream closes once the run has ended.
  function followRun() {
    const first = document.querySelector(".run-page[data-stream]");
    if (!first) return;
    let leaving = false;  // a form of this page is posting: it navigates by itself
    document.addEventListener("submit", (e) => { if (!e.defaultPrevented) leaving = true; });
    const source = new EventSource(first.dataset.stream);
    let queued = false;
    let chain = Promise.resolve();
    source.onmessage = () => {
      if (queued) return;  // the next read shows this event too
      queued = true;
      chain = chain.then(async () => {
        queued = false;
        const response = await fetch(location.href, { credentials: "same-origin" });
        if (leaving || !response.ok) return;
        const fresh = new DOMParser().parseFromString(await response.text(), "text/html").querySelector(".run-page");
        if (!fresh || leaving) return;
        const shown = document.querySelector(".run-page");
        const was = shown.querySelector(".run-status").textContent;
        const draft = shown.querySelector("#run-message-text");
        const into = fresh.querySelector("#run-message-text");
        const focused = draft && draft === document.activeElement;
        if (draft && into) into.value = draft.value;
        const now = document.adoptNode(fresh);
        localTimes(now);
        confirming(now);
        shown.replaceWith(now);
        if (focused && into) {
          into.focus();
          into.setSelectionRange(draft.selectionStart, draft.selectionEnd);
        }
        const status = now.querySelector(".run-status").textContent;
        if (status !== was) say(`Run ${status}`);
        if (!now.dataset.stream) source.close();  // it has ended: nothing more will change
      }).catch((e) => console.error(e));
    };
  }

  // A pending request's own page: settled elsewhere while open (another tab, the CLI, a
  // teammate), it is shown as it is now rather than with a form that can only be refused.
  function followOne() {
    const shown = document.querySelector(".request-page[data-status=pending]");
    if (!shown || !document.body.dataset.stream) return;
    let leaving = false;  // this page's own answer is on its way: it navigates by itself
    document.addEventListener("submit", () => { leaving = true; });
    const source = new EventSource(document.body.dataset.stream);
    const settled = (event) => {
      if (leaving || JSON.parse(event.data).request_id !== shown.dataset.id) return;
      source.close();
      location.reload();
    };
    for (const type of SETTLED) source.addEventListener(type, settled);
  }
})();
