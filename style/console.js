// Progressive enhancement only: every page works without this file.
// A "Copy" button beside a shareable link copies it (and says so).
(function () {
  function bind() {
    document.querySelectorAll('button.copy-link').forEach(function (button) {
      var field = document.querySelector('input[name="' + button.dataset.copy + '"]');
      if (!field || !navigator.clipboard) return;
      button.hidden = false;
      button.addEventListener('click', function () {
        navigator.clipboard.writeText(field.value).then(function () {
          button.textContent = 'Copied';
        }, function () {
          field.select();
        });
      });
    });
  }
  bind();
  // Again after a live page updated itself in place.
  document.addEventListener('fenceline:updated', bind);
})();
// A permalink to an event that is not on the page shown opens the page that holds it.
(function () {
  // Signing in from a shared link: the browser kept the link's #anchor on /login; carry it.
  var next = document.querySelector('form[action="/login"] input[name="next"]');
  if (next && /^#e\d+$/.test(location.hash) && next.value.indexOf('#') < 0) {
    next.value += location.hash;
  }
  if (next) return;
  var match = location.hash.match(/^#e(\d+)$/);
  if (!match || document.getElementById('e' + match[1])) return;
  var url = new URL(location.href);
  if (url.searchParams.get('around') === match[1]) return;
  url.searchParams.delete('after');
  url.searchParams.delete('open');
  url.searchParams.set('around', match[1]);
  location.replace(url.toString());
})();
// The zone chooser offers this browser's own time zone.
(function () {
  var button = document.querySelector('button.zone-local');
  var field = document.querySelector('.zone-form input[name="tz"]');
  var zone = window.Intl && Intl.DateTimeFormat().resolvedOptions().timeZone;
  if (!button || !field || !zone) return;
  button.hidden = false;
  button.textContent = 'Use this browser\'s zone (' + zone + ')';
  button.addEventListener('click', function () {
    field.value = zone;
    field.form.submit();
  });
})();
// A live page updates in place: every few seconds it fetches itself and swaps in the new
// content, so the reader keeps their place; it stops once the page is no longer live, and
// leaves the page alone while a form in it is being filled in or a section is open.
(function () {
  var marker = document.querySelector('[data-live-seconds]');
  if (!marker || !window.fetch || !window.DOMParser) return;
  var seconds = Number(marker.getAttribute('data-live-seconds')) || 5;
  function busy(main) {
    var active = document.activeElement;
    if (active && main.contains(active) && /^(INPUT|TEXTAREA|SELECT)$/.test(active.tagName)) return true;
    return !!main.querySelector('details[open] form');
  }
  function tick() {
    var main = document.getElementById('main');
    if (!main) return;
    if (busy(main)) { setTimeout(tick, seconds * 1000); return; }
    fetch(location.href, { credentials: 'same-origin', headers: { 'Accept': 'text/html' } })
      .then(function (response) {
        if (!response.ok || response.redirected) throw new Error('reload');
        return response.text();
      })
      .then(function (html) {
        var next = new DOMParser().parseFromString(html, 'text/html');
        var fresh = next.getElementById('main');
        if (!fresh) throw new Error('reload');
        if (busy(main)) { setTimeout(tick, seconds * 1000); return; }
        main.innerHTML = fresh.innerHTML;
        document.title = next.title;
        document.dispatchEvent(new CustomEvent('fenceline:updated'));
        if (main.querySelector('[data-live-seconds]')) setTimeout(tick, seconds * 1000);
      })
      .catch(function () { setTimeout(function () { location.reload(); }, seconds * 1000); });
  }
  setTimeout(tick, seconds * 1000);
})();
