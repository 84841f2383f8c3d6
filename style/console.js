// Progressive enhancement only: every page works without this file.
// A "Copy" button beside a shareable link copies it (and says so).
(function () {
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
