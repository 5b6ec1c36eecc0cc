// Live updates: every data-poll ms, fetch this page's main part (?fragment=1) and swap it in.
(function () {
  var body = document.body;
  if (body.dataset.live !== "1") return;
  var every = parseInt(body.dataset.poll || "2000", 10);
  var main = document.querySelector("main");
  var dot = document.getElementById("live-dot");
  var text = document.getElementById("live-text");
  var last = main.innerHTML;
  function tick() {
    var url = location.pathname + (location.search ? location.search + "&" : "?") + "fragment=1";
    fetch(url, { cache: "no-store" }).then(function (r) {
      var h = r.headers.get("X-Height");
      return r.text().then(function (t) { return [t, h]; });
    }).then(function (res) {
      if (res[0] !== last) { main.innerHTML = res[0]; last = res[0]; }
      dot.className = "dot";
      text.textContent = "height " + (parseInt(res[1], 10) + 1) + " · updated " + new Date().toLocaleTimeString();
    }).catch(function () {
      dot.className = "dot off";
      text.textContent = "explorer unreachable, retrying";
    }).finally(function () { setTimeout(tick, every); });
  }
  setTimeout(tick, every);
})();
