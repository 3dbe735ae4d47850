# bash completion for foxctl: commands, their sub-commands and options,
# config keys from the running foxd, ISV slot names. Installed as
# share/bash-completion/completions/foxctl.
_foxctl() {
    local cur prev words cword
    _init_completion 2>/dev/null || {
        cur=${COMP_WORDS[COMP_CWORD]}
        prev=${COMP_WORDS[COMP_CWORD - 1]}
        words=("${COMP_WORDS[@]}")
        cword=$COMP_CWORD
    }
    local commands="status run start-fold pause resume stop reset-fold isv isv-list sentinels
        flags checkpoint config metrics watch inject-fault shutdown version raw sweep backtest
        plot compare help"
    local globals="--url --token --json --timeout --pub --cert --key --ca --server-name --help --version"
    case $prev in
    --cert | --key | --ca) COMPREPLY=($(compgen -f -- "$cur")); return ;;
    --checkpoint | --data) COMPREPLY=($(compgen -f -- "$cur")); return ;;
    --out | --dir | --gather) COMPREPLY=($(compgen -d -- "$cur")); return ;;
    --url | --token | --timeout | --pub | --server-name) return ;;
    esac
    # The command is the first word that is neither an option nor an option's value. The
    # connection options given are kept: the keys and slot names come from that foxd.
    local i cmd= sub= conn=()
    for ((i = 1; i < cword; i++)); do
        case ${words[i]} in
        --url | --token | --pub | --cert | --key | --ca | --server-name)
            conn+=("${words[i]}" "${words[i + 1]}")
            ((i++))
            ;;
        --timeout) ((i++)) ;;
        --url=* | --token=* | --pub=* | --cert=* | --key=* | --ca=* | --server-name=*)
            conn+=("${words[i]}")
            ;;
        -*) ;;
        *) if [ -z "$cmd" ]; then cmd=${words[i]}; else sub=${sub:-${words[i]}}; fi ;;
        esac
    done
    if [ -z "$cmd" ]; then
        COMPREPLY=($(compgen -W "$commands $globals" -- "$cur"))
        return
    fi
    # Global options may follow the command too.
    if [[ $cur == --* && $cmd != help ]]; then
        COMPREPLY=($(compgen -W "${globals% --help --version}" -- "$cur"))
    fi
    case $cmd in
    help) [ -z "$sub" ] && COMPREPLY=($(compgen -W "$commands" -- "$cur")) ;;
    run) COMPREPLY+=($(compgen -W "--folds --epochs --steps --detach --spawn" -- "$cur")) ;;
    start-fold) COMPREPLY+=($(compgen -W "--epochs --steps --detach" -- "$cur")) ;;
    flags) COMPREPLY+=($(compgen -W "--clear --member" -- "$cur")) ;;
    watch) COMPREPLY+=($(compgen -W "--count --until" -- "$cur")) ;;
    shutdown) COMPREPLY+=($(compgen -W "--no-checkpoint" -- "$cur")) ;;
    checkpoint)
        if [ -z "$sub" ]; then
            COMPREPLY=($(compgen -W "save load list" -- "$cur"))
        elif [ "$sub" = list ]; then
            COMPREPLY=($(compgen -d -- "$cur"))
        fi
        ;;
    sweep) COMPREPLY+=($(compgen -W "--folds --seeds --grid --set --epochs --steps --dir --endpoints
        --attempts --wait --slurm --gather --no-pack" -- "$cur")) ;;
    backtest) COMPREPLY+=($(compgen -W "--checkpoint --data --bars --out --daemon" -- "$cur")) ;;
    plot) COMPREPLY+=($(compgen -W "--follow --every" -- "$cur") $(compgen -d -- "$cur")) ;;
    compare) COMPREPLY+=($(compgen -W "--out" -- "$cur") $(compgen -d -- "$cur")) ;;
    inject-fault) COMPREPLY+=($(compgen -W "--step --member" -- "$cur")) ;;
    isv)
        [[ $cur == -* ]] && COMPREPLY+=($(compgen -W "--member" -- "$cur"))
        # Slot names from foxd itself, when one answers quickly.
        local names
        names=$(foxctl "${conn[@]}" --timeout 1000 --json isv-list 2>/dev/null |
            grep -o '"name":[[:space:]]*"[A-Za-z0-9_]*"' | sed 's/.*"\([^"]*\)"$/\1/')
        COMPREPLY+=($(compgen -W "$names" -- "$cur"))
        ;;
    config)
        if [ -z "$sub" ]; then
            COMPREPLY=($(compgen -W "get set" -- "$cur"))
        elif [[ $sub == set && $cur == -* ]]; then
            COMPREPLY+=($(compgen -W "--force" -- "$cur"))
        elif [ "$sub" = get ] || [ "$sub" = set ]; then
            # Keys from foxd itself, when one answers quickly: dotted, digits allowed (model.h1).
            local keys
            keys=$(foxctl "${conn[@]}" --timeout 1000 --json config get 2>/dev/null |
                grep -o '"[a-z][a-z0-9_]*\.[a-z0-9_.]*":' | tr -d '":')
            [ "$sub" = set ] && { compopt -o nospace 2>/dev/null; keys=$(printf '%s=\n' $keys); }
            COMPREPLY+=($(compgen -W "$keys" -- "$cur"))
        fi
        ;;
    esac
}
complete -F _foxctl foxctl
