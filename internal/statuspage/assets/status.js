// watukuy status page: the buttons call the admin API with the login cookie, show what it
// answered, then reload the page's data in place. No framework, no build step.
(function () {
  'use strict';

  // A cookie-authenticated request that acts must carry this header (admin.RequestHeader):
  // a form on another site cannot set it.
  var REQUEST_HEADER = 'X-Watukuy-Request';
  var AUTO_KEY = 'watukuy-status-autorefresh';
  var AUTO_EVERY_MS = 10000;

  function flash(text, ok) {
    var el = document.getElementById('flash');
    if (!el) { return; }
    el.textContent = text;
    el.className = ok ? 'ok' : 'bad';
    el.hidden = false;
  }

  // describe turns the API's answer to an action into one line.
  function describe(j) {
    if (!j || typeof j !== 'object') { return 'done'; }
    if (typeof j.released === 'number') {
      return 'released ' + j.released + (j.released === 1 ? ' row' : ' rows');
    }
    if (Array.isArray(j.keys)) {
      return j.keys.map(function (k) {
        var name = k.poller + '/' + (k.partition === '' ? '-' : k.partition);
        return k.status ? name + ': ' + k.status : name;
      }).join(', ') || 'no keys';
    }
    if (j.status) { return j.status; }
    return 'done';
  }

  // failure renders an API error: {"error": {"code", "message", "known"}} or the raw text.
  function failure(status, j, text) {
    var e = j && j.error;
    if (e && e.message) {
      var s = e.message + ' (' + (e.code || status) + ')';
      if (Array.isArray(e.known) && e.known.length) { s += '; known: ' + e.known.join(', '); }
      return s;
    }
    return 'HTTP ' + status + (text ? ': ' + text.slice(0, 200) : '');
  }

  // reload fetches this page again and swaps its data in, keeping the message shown.
  function reload() {
    return fetch(location.href, { credentials: 'same-origin', headers: { Accept: 'text/html' } })
      .then(function (r) {
        if (r.status === 401) { throw new Error('the login has ended: reload the page to log in again'); }
        return r.text();
      })
      .then(function (html) {
        var fresh = new DOMParser().parseFromString(html, 'text/html').getElementById('content');
        var cur = document.getElementById('content');
        if (fresh && cur) {
          // Keep open <details> open across the swap (a JSON being read).
          var open = {};
          cur.querySelectorAll('tr[data-row] details[open]').forEach(function (d) {
            open[d.closest('tr').getAttribute('data-row')] = true;
          });
          fresh.querySelectorAll('tr[data-row]').forEach(function (tr) {
            var d = tr.querySelector('details');
            if (d && open[tr.getAttribute('data-row')]) { d.open = true; }
          });
          cur.replaceWith(fresh);
        }
        document.body.setAttribute('data-reloaded', String(Date.now()));
      });
  }

  function act(b) {
    var msg = b.getAttribute('data-confirm');
    if (msg && !window.confirm(msg)) { return; }
    var label = b.getAttribute('data-label') || b.textContent.trim();
    var body = b.getAttribute('data-body');
    var headers = { Accept: 'application/json' };
    headers[REQUEST_HEADER] = '1';
    if (body) { headers['Content-Type'] = 'application/json'; }
    b.disabled = true;
    fetch(b.getAttribute('data-api'), { method: 'POST', credentials: 'same-origin', headers: headers, body: body || undefined })
      .then(function (r) {
        return r.text().then(function (text) {
          var j = null;
          try { j = JSON.parse(text); } catch (ignored) { /* not JSON: shown as text */ }
          if (r.ok) { flash(label + ': ' + describe(j), true); } else { flash(label + ' failed: ' + failure(r.status, j, text), false); }
        });
      })
      .then(reload)
      .catch(function (err) { flash(label + ' failed: ' + err.message, false); })
      .then(function () { b.disabled = false; });
  }

  document.addEventListener('click', function (ev) {
    var t = ev.target;
    if (!(t instanceof Element)) { return; }
    var b = t.closest('button[data-api]');
    if (b) { ev.preventDefault(); act(b); return; }
    if (t.closest('button[data-refresh]')) {
      ev.preventDefault();
      reload().catch(function (err) { flash('refresh failed: ' + err.message, false); });
    }
  });

  document.addEventListener('DOMContentLoaded', function () {
    var box = document.querySelector('input[data-autorefresh]');
    if (!box) { return; }
    try { box.checked = localStorage.getItem(AUTO_KEY) === '1'; } catch (ignored) { /* storage off */ }
    box.addEventListener('change', function () {
      try { localStorage.setItem(AUTO_KEY, box.checked ? '1' : '0'); } catch (ignored) { /* storage off */ }
    });
    setInterval(function () {
      if (box.checked && !document.hidden) {
        reload().catch(function (err) { flash('refresh failed: ' + err.message, false); });
      }
    }, AUTO_EVERY_MS);
  });
})();
