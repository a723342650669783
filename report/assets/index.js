// The store index: filters rows by text and verdict; reports script errors in
// body[data-script-errors] ("0" once initialised without error) for a headless-browser test.
(function () {
  var errors = 0;
  window.onerror = function () {
    errors += 1;
    document.body.dataset.scriptErrors = String(errors);
  };
  var text = document.getElementById("filter-text");
  var verdict = document.getElementById("filter-verdict");
  var shown = document.getElementById("shown");
  var rows = Array.prototype.slice.call(document.querySelectorAll("#runs tbody tr"));
  var haystacks = rows.map(function (row) { return row.textContent.toLowerCase(); });
  function apply() {
    var needle = text.value.trim().toLowerCase();
    var want = verdict.value;
    var count = 0;
    rows.forEach(function (row, i) {
      var ok = (want === "" || row.dataset.verdict === want) &&
        (needle === "" || haystacks[i].indexOf(needle) >= 0);
      row.hidden = !ok;
      if (ok) { count += 1; }
    });
    shown.textContent = String(count);
  }
  text.addEventListener("input", apply);
  verdict.addEventListener("change", apply);
  apply();
  document.body.dataset.scriptErrors = String(errors);
})();
