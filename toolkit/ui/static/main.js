// Picks the page from the URL: /, /jobs/NAME, /jobs/NAME/study, /jobs/NAME/stuck.
"use strict";

(() => {
  const root = document.getElementById("app");
  const parts = location.pathname.split("/").filter(Boolean).map(decodeURIComponent);
  if (parts[0] === "jobs" && parts.length >= 2) {
    const page = {study: StudyPage, stuck: StuckPage}[parts[2]] || JobPage;
    document.title = "tfdist: " + parts[1];
    page.render(root, parts[1]);
  } else {
    ListPage.render(root);
  }
})();
